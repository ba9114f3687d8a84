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
	"sync"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/petri-dev/petri/sync/provider"
)

// notes is the command reader's notes: a merge request's, a project's
// recent ones, and award emoji on them as reactions. GitLab names a note's
// award emoji under its merge request, so the merge request of each note
// read is remembered.
type notes struct {
	*api

	mu sync.Mutex
	// byID is the merge request of each note read, by repository and note
	// id.
	byID map[noteKey]int
	// order is the order notes were first remembered in, oldest first
	// (rememberNote).
	order []noteKey
}

type noteKey struct {
	repository string
	id         int64
}

// ListComments lists a merge request's notes, oldest first, 100 a page.
// GitLab's system notes ("added 1 commit", "changed the description") are
// not comments anyone wrote and are left out.
func (ns *notes) ListComments(ctx context.Context, repository string, number int) ([]provider.Comment, error) {
	pid, err := project(repository)
	if err != nil {
		return nil, err
	}
	out, err := ns.listNotes(ctx, pid, repository, number, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("list notes of %s!%d: %w", repository, number, err)
	}
	return out, nil
}

// listNotes lists the notes of a merge request updated at or after since.
func (ns *notes) listNotes(ctx context.Context, pid, repository string, number int, since time.Time) ([]provider.Comment, error) {
	opts := &gl.ListMergeRequestNotesOptions{ListOptions: gl.ListOptions{PerPage: pageSize},
		OrderBy: gl.Ptr("created_at"), Sort: gl.Ptr("asc")}
	var out []provider.Comment
	for {
		if err := ns.before(); err != nil {
			return nil, err
		}
		notes, resp, err := ns.client.Notes.ListMergeRequestNotes(pid, int64(number), opts, gl.WithContext(ctx))
		if err := ns.after(resp, err); err != nil {
			return nil, err
		}
		for _, n := range notes {
			if n.System {
				continue
			}
			ns.rememberNote(repository, n.ID, number)
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
func (ns *notes) ListRepositoryComments(ctx context.Context, repository string, since time.Time) ([]provider.Comment, error) {
	pid, err := project(repository)
	if err != nil {
		return nil, err
	}
	t := since.UTC().Truncate(time.Second)
	var numbers []int
	err = ns.listMergeRequests(ctx, pid, &gl.ListProjectMergeRequestsOptions{ListOptions: gl.ListOptions{PerPage: pageSize},
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
		cs, err := ns.listNotes(ctx, pid, repository, n, t)
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
func (ns *notes) rememberNote(repository string, id int64, number int) {
	k := noteKey{repoKey(repository), id}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if _, ok := ns.byID[k]; !ok {
		ns.order = append(ns.order, k)
	}
	ns.byID[k] = number
	for len(ns.byID) > maxNotes && len(ns.order) > 0 {
		delete(ns.byID, ns.order[0])
		ns.order = ns.order[1:]
	}
	if len(ns.order) > 2*maxNotes {
		// Notes forgotten with their merge request left their keys here.
		kept := ns.order[:0:0]
		for _, k := range ns.order {
			if _, ok := ns.byID[k]; ok {
				kept = append(kept, k)
			}
		}
		ns.order = kept
	}
}

// noteScan is how many of a project's most recently updated merge requests
// are searched for a note never read before.
const noteScan = 20

// mergeRequestOf is the merge request a note is on: as read with it, else
// searched for among the most recently updated merge requests (a new note
// touches its merge request). provider.ErrNotFound when none has it.
func (ns *notes) mergeRequestOf(ctx context.Context, pid, repository string, id int64) (int, error) {
	ns.mu.Lock()
	n, ok := ns.byID[noteKey{repoKey(repository), id}]
	ns.mu.Unlock()
	if ok {
		return n, nil
	}
	if err := ns.before(); err != nil {
		return 0, err
	}
	mrs, resp, err := ns.client.MergeRequests.ListProjectMergeRequests(pid, &gl.ListProjectMergeRequestsOptions{
		ListOptions: gl.ListOptions{PerPage: noteScan}, State: gl.Ptr("all"), OrderBy: gl.Ptr("updated_at"), Sort: gl.Ptr("desc"),
	}, gl.WithContext(ctx))
	if err := ns.after(resp, err); err != nil {
		return 0, err
	}
	for _, mr := range mrs {
		if _, err := ns.listNotes(ctx, pid, repository, int(mr.IID), time.Time{}); err != nil {
			return 0, err
		}
		ns.mu.Lock()
		n, ok = ns.byID[noteKey{repoKey(repository), id}]
		ns.mu.Unlock()
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
func (ns *notes) React(ctx context.Context, repository string, commentID int64, reaction string) error {
	pid, err := project(repository)
	if err != nil {
		return err
	}
	number, err := ns.mergeRequestOf(ctx, pid, repository, commentID)
	if err != nil {
		return fmt.Errorf("react %s to note %d on %s: %w", reaction, commentID, repository, err)
	}
	if err := ns.before(); err != nil {
		return err
	}
	name := emoji(reaction)
	_, resp, err := ns.client.AwardEmoji.CreateMergeRequestAwardEmojiOnNote(pid, int64(number), commentID,
		&gl.CreateAwardEmojiOptions{Name: name}, gl.WithContext(ctx))
	if err != nil && resp != nil && resp.StatusCode == http.StatusNotFound {
		if given, ferr := ns.awarded(ctx, pid, number, commentID, name); ferr == nil && given {
			return nil
		}
	}
	if err := ns.after(resp, err); err != nil {
		return fmt.Errorf("react %s to note %d on %s!%d: %w", reaction, commentID, repository, number, err)
	}
	return nil
}

// awarded tells whether the provider's identity gave a note the award
// emoji name.
func (ns *notes) awarded(ctx context.Context, pid string, number int, noteID int64, name string) (bool, error) {
	self, err := ns.Self(ctx)
	if err != nil {
		return false, err
	}
	if err := ns.before(); err != nil {
		return false, err
	}
	awards, resp, err := ns.client.AwardEmoji.ListMergeRequestAwardEmojiOnNote(pid, int64(number), noteID,
		&gl.ListAwardEmojiOptions{ListOptions: gl.ListOptions{PerPage: pageSize}}, gl.WithContext(ctx))
	if err := ns.after(resp, err); err != nil {
		return false, err
	}
	for _, a := range awards {
		if a.Name == name && strings.EqualFold(a.User.Username, self) {
			return true, nil
		}
	}
	return false, nil
}

// members is the command reader's permissions: a user's membership of a
// project.
type members struct{ *api }

// forgetPullRequest forgets the merge request of a merge request's notes.
func (ns *notes) forgetPullRequest(repository string, number int) {
	key := repoKey(repository)
	ns.mu.Lock()
	for k, n := range ns.byID {
		if k.repository == key && n == number {
			delete(ns.byID, k)
		}
	}
	ns.mu.Unlock()
}

// forgetRepository forgets the merge request of every note of a
// repository.
func (ns *notes) forgetRepository(repository string) {
	key := repoKey(repository)
	ns.mu.Lock()
	for k := range ns.byID {
		if k.repository == key {
			delete(ns.byID, k)
		}
	}
	ns.mu.Unlock()
}

// Permission reads a user's permission on a project from the user's
// membership, inherited from groups or not (GET
// /projects/:id/members/all/:user_id): Maintainer and Owner are admin,
// Developer write, Guest, Planner and Reporter read, Minimal Access, a
// membership not active (blocked, awaiting) and no membership at all none.
// The user's id is asked once (GET /users?username=).
func (ms *members) Permission(ctx context.Context, repository, user string) (string, error) {
	pid, err := project(repository)
	if err != nil {
		return "", err
	}
	id, err := ms.userID(ctx, user)
	if errors.Is(err, provider.ErrNotFound) {
		return provider.PermissionNone, nil
	}
	if err != nil {
		return "", fmt.Errorf("permission of %s on %s: %w", user, repository, err)
	}
	if err := ms.before(); err != nil {
		return "", err
	}
	m, resp, err := ms.client.ProjectMembers.GetInheritedProjectMember(pid, id, gl.WithContext(ctx))
	if err := ms.after(resp, err); err != nil {
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
func (ms *members) userID(ctx context.Context, user string) (int64, error) {
	if err := ms.before(); err != nil {
		return 0, err
	}
	us, resp, err := ms.client.Users.ListUsers(&gl.ListUsersOptions{Username: gl.Ptr(user)}, gl.WithContext(ctx))
	if err := ms.after(resp, err); err != nil {
		return 0, err
	}
	for _, u := range us {
		if strings.EqualFold(u.Username, user) {
			return u.ID, nil
		}
	}
	return 0, fmt.Errorf("user %s: %w", user, provider.ErrNotFound)
}
