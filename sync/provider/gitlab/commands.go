// The command reader: note listings (commands and sync's own note), award
// emoji as reactions, members' access levels as permissions
// (provider.CommandReader).

package gitlab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/petri-dev/petri/sync/provider"
)

// ListComments lists a merge request's notes, oldest first, 100 a page.
// GitLab's system notes ("added 1 commit", "changed the description") are
// not comments anyone wrote and are left out.
func (p *Provider) ListComments(ctx context.Context, repository string, number int) ([]provider.Comment, error) {
	pid, err := project(repository)
	if err != nil {
		return nil, err
	}
	out, err := p.listNotes(ctx, pid, repository, number, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("list notes of %s!%d: %w", repository, number, err)
	}
	return out, nil
}

// listNotes lists the notes of a merge request updated at or after since.
func (p *Provider) listNotes(ctx context.Context, pid, repository string, number int, since time.Time) ([]provider.Comment, error) {
	opts := &gl.ListMergeRequestNotesOptions{ListOptions: gl.ListOptions{PerPage: pageSize},
		OrderBy: gl.Ptr("created_at"), Sort: gl.Ptr("asc")}
	var out []provider.Comment
	for {
		if err := p.before(); err != nil {
			return nil, err
		}
		notes, resp, err := p.client.Notes.ListMergeRequestNotes(pid, int64(number), opts, gl.WithContext(ctx))
		if err := p.after(resp, err); err != nil {
			return nil, err
		}
		for _, n := range notes {
			if n.System {
				continue
			}
			p.rememberNote(repository, n.ID, number)
			c := convertNote(n, number)
			if c.UpdatedAt.Before(since) {
				continue
			}
			out = append(out, c)
		}
		if resp.NextPage == 0 || len(notes) == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	slices.SortStableFunc(out, func(a, b provider.Comment) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

func convertNote(n *gl.Note, number int) provider.Comment {
	c := provider.Comment{ID: n.ID, Number: number, Author: n.Author.Username, Body: n.Body}
	if n.CreatedAt != nil {
		c.CreatedAt = *n.CreatedAt
	}
	if n.UpdatedAt != nil {
		c.UpdatedAt = *n.UpdatedAt
	} else {
		c.UpdatedAt = c.CreatedAt
	}
	return c
}

// ListRepositoryComments lists the notes on every merge request of a
// project updated at or after since (to the second), oldest first. GitLab
// has no listing of a project's notes: a note touches its merge request's
// updated_at, so the merge requests updated since then (in any state) are
// listed and each one's notes read. An unchanged project costs one
// request. Notes on issues are not read: commands are given on merge
// requests.
func (p *Provider) ListRepositoryComments(ctx context.Context, repository string, since time.Time) ([]provider.Comment, error) {
	pid, err := project(repository)
	if err != nil {
		return nil, err
	}
	t := since.UTC().Truncate(time.Second)
	var numbers []int
	err = p.listMergeRequests(ctx, pid, &gl.ListProjectMergeRequestsOptions{ListOptions: gl.ListOptions{PerPage: pageSize},
		State: gl.Ptr("all"), UpdatedAfter: gl.Ptr(t), OrderBy: gl.Ptr("updated_at"), Sort: gl.Ptr("asc")},
		func(_ *gl.Response, mrs []*gl.BasicMergeRequest) {
			for _, mr := range mrs {
				numbers = append(numbers, int(mr.IID))
			}
		})
	if err != nil {
		return nil, fmt.Errorf("list merge requests of %s updated since %s: %w", repository, t.Format(time.RFC3339), err)
	}
	var out []provider.Comment
	for _, n := range numbers {
		cs, err := p.listNotes(ctx, pid, repository, n, t)
		if err != nil {
			return nil, fmt.Errorf("list notes of %s!%d: %w", repository, n, err)
		}
		out = append(out, cs...)
	}
	slices.SortStableFunc(out, func(a, b provider.Comment) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// maxNotes bounds the notes whose merge request is remembered: a project's
// history, and anyone who comments, would otherwise grow it for ever. A
// note forgotten is searched for again (mergeRequestOf) if it is ever
// reacted to.
const maxNotes = 10000

// rememberNote records the merge request of a note, forgetting the oldest
// remembered beyond maxNotes.
func (p *Provider) rememberNote(repository string, id int64, number int) {
	k := noteKey{repoKey(repository), id}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.notes[k]; !ok {
		p.noteOrder = append(p.noteOrder, k)
	}
	p.notes[k] = number
	for len(p.notes) > maxNotes && len(p.noteOrder) > 0 {
		delete(p.notes, p.noteOrder[0])
		p.noteOrder = p.noteOrder[1:]
	}
	if len(p.noteOrder) > 2*maxNotes {
		// Notes forgotten with their merge request left their keys here.
		kept := p.noteOrder[:0:0]
		for _, k := range p.noteOrder {
			if _, ok := p.notes[k]; ok {
				kept = append(kept, k)
			}
		}
		p.noteOrder = kept
	}
}

// noteScan is how many of a project's most recently updated merge requests
// are searched for a note never read before.
const noteScan = 20

// mergeRequestOf is the merge request a note is on: as read with it, else
// searched for among the most recently updated merge requests (a new note
// touches its merge request). provider.ErrNotFound when none has it.
func (p *Provider) mergeRequestOf(ctx context.Context, pid, repository string, id int64) (int, error) {
	p.mu.Lock()
	n, ok := p.notes[noteKey{repoKey(repository), id}]
	p.mu.Unlock()
	if ok {
		return n, nil
	}
	if err := p.before(); err != nil {
		return 0, err
	}
	mrs, resp, err := p.client.MergeRequests.ListProjectMergeRequests(pid, &gl.ListProjectMergeRequestsOptions{
		ListOptions: gl.ListOptions{PerPage: noteScan}, State: gl.Ptr("all"), OrderBy: gl.Ptr("updated_at"), Sort: gl.Ptr("desc"),
	}, gl.WithContext(ctx))
	if err := p.after(resp, err); err != nil {
		return 0, err
	}
	for _, mr := range mrs {
		if _, err := p.listNotes(ctx, pid, repository, int(mr.IID), time.Time{}); err != nil {
			return 0, err
		}
		p.mu.Lock()
		n, ok = p.notes[noteKey{repoKey(repository), id}]
		p.mu.Unlock()
		if ok {
			return n, nil
		}
	}
	return 0, fmt.Errorf("note %d on no recent merge request: %w", id, provider.ErrNotFound)
}

// emoji is GitLab's award emoji name of a reaction.
func emoji(reaction string) string {
	switch reaction {
	case provider.ReactionAccepted:
		return "thumbsup"
	case provider.ReactionRefused:
		return "thumbsdown"
	}
	return reaction
}

// React awards an emoji to a note: +1 is thumbsup, -1 thumbsdown. GitLab
// refuses the same award twice by the same user with a 404 (as it answers
// for a note that is gone): after a 404 the note's awards are read, and the
// provider's own award already there is no error.
func (p *Provider) React(ctx context.Context, repository string, commentID int64, reaction string) error {
	pid, err := project(repository)
	if err != nil {
		return err
	}
	number, err := p.mergeRequestOf(ctx, pid, repository, commentID)
	if err != nil {
		return fmt.Errorf("react %s to note %d on %s: %w", reaction, commentID, repository, err)
	}
	if err := p.before(); err != nil {
		return err
	}
	name := emoji(reaction)
	_, resp, err := p.client.AwardEmoji.CreateMergeRequestAwardEmojiOnNote(pid, int64(number), commentID,
		&gl.CreateAwardEmojiOptions{Name: name}, gl.WithContext(ctx))
	if err != nil && resp != nil && resp.StatusCode == http.StatusNotFound {
		if given, ferr := p.awarded(ctx, pid, number, commentID, name); ferr == nil && given {
			return nil
		}
	}
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("react %s to note %d on %s!%d: %w", reaction, commentID, repository, number, err)
	}
	return nil
}

// awarded tells whether the provider's identity gave a note the award
// emoji name.
func (p *Provider) awarded(ctx context.Context, pid string, number int, noteID int64, name string) (bool, error) {
	self, err := p.Self(ctx)
	if err != nil {
		return false, err
	}
	if err := p.before(); err != nil {
		return false, err
	}
	awards, resp, err := p.client.AwardEmoji.ListMergeRequestAwardEmojiOnNote(pid, int64(number), noteID,
		&gl.ListAwardEmojiOptions{ListOptions: gl.ListOptions{PerPage: pageSize}}, gl.WithContext(ctx))
	if err := p.after(resp, err); err != nil {
		return false, err
	}
	for _, a := range awards {
		if a.Name == name && strings.EqualFold(a.User.Username, self) {
			return true, nil
		}
	}
	return false, nil
}

// Permission reads a user's permission on a project from the user's
// membership, inherited from groups or not (GET
// /projects/:id/members/all/:user_id): Maintainer and Owner are admin,
// Developer write, Guest, Planner and Reporter read, Minimal Access, a
// membership not active (blocked, awaiting) and no membership at all none.
// The user's id is asked once (GET /users?username=).
func (p *Provider) Permission(ctx context.Context, repository, user string) (string, error) {
	pid, err := project(repository)
	if err != nil {
		return "", err
	}
	id, err := p.userID(ctx, user)
	if errors.Is(err, provider.ErrNotFound) {
		return provider.PermissionNone, nil
	}
	if err != nil {
		return "", fmt.Errorf("permission of %s on %s: %w", user, repository, err)
	}
	if err := p.before(); err != nil {
		return "", err
	}
	m, resp, err := p.client.ProjectMembers.GetInheritedProjectMember(pid, id, gl.WithContext(ctx))
	if err := p.after(resp, err); err != nil {
		if errors.Is(err, provider.ErrNotFound) {
			return provider.PermissionNone, nil
		}
		return "", fmt.Errorf("permission of %s on %s: %w", user, repository, err)
	}
	if m.State != "" && m.State != "active" {
		return provider.PermissionNone, nil
	}
	return permission(m.AccessLevel), nil
}

// permission maps GitLab's access levels onto provider.Permission*.
func permission(l gl.AccessLevelValue) string {
	switch {
	case l >= gl.MaintainerPermissions:
		return provider.PermissionAdmin
	case l >= gl.DeveloperPermissions:
		return provider.PermissionWrite
	case l >= gl.GuestPermissions:
		return provider.PermissionRead
	}
	return provider.PermissionNone
}

// userID is a username's user id now; provider.ErrNotFound when there is
// no such user. It is asked each time: a username is not an identity
// (someone renamed frees theirs for anyone to register), and a command's
// permission must be its author's today, not the old holder's of the name.
func (p *Provider) userID(ctx context.Context, user string) (int64, error) {
	if err := p.before(); err != nil {
		return 0, err
	}
	us, resp, err := p.client.Users.ListUsers(&gl.ListUsersOptions{Username: gl.Ptr(user)}, gl.WithContext(ctx))
	if err := p.after(resp, err); err != nil {
		return 0, err
	}
	for _, u := range us {
		if strings.EqualFold(u.Username, user) {
			return u.ID, nil
		}
	}
	return 0, fmt.Errorf("user %s: %w", user, provider.ErrNotFound)
}
