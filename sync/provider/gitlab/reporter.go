// The reporter: a commit status per application and the one note edited in
// place (provider.Reporter); its deployment methods are in deployments.go.

package gitlab

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/provider/internal/forge"
)

// reporter is the reporter's commit statuses and the one note sync keeps
// on a merge request, which it finds among the notes.
type reporter struct {
	*api
	comments *forge.Comments
	notes    *notes
}

// commitState maps a provider commit status state onto GitLab's: GitLab
// has no error state, so failure and error are both failed.
func commitState(s string) gl.BuildStateValue {
	switch s {
	case "failure", "error":
		return gl.Failed
	}
	return gl.BuildStateValue(s)
}

// SetCommitStatus posts a commit status named st.Context, unless its
// latest status already says the same (a restarted sync does not repeat
// it). GitLab keeps a pending or running status of a name as one record and
// refuses to move it into the state it is in ("Cannot transition status"):
// a pending status whose description alone changed keeps its first
// description, and that refusal is no error.
func (rp *reporter) SetCommitStatus(ctx context.Context, repository, sha string, st provider.CommitStatus) error {
	pid, err := project(repository)
	if err != nil {
		return err
	}
	want := commitState(st.State)
	if err := rp.before(); err != nil {
		return err
	}
	sts, resp, err := rp.client.Commits.GetCommitStatuses(pid, sha, &gl.GetCommitStatusesOptions{
		Name: gl.Ptr(st.Context), ListOptions: gl.ListOptions{PerPage: pageSize}}, gl.WithContext(ctx))
	if err := rp.after(resp, err); err != nil {
		return fmt.Errorf("read commit statuses of %s@%s: %w", repository, short(sha), err)
	}
	var latest *gl.CommitStatus
	for _, l := range sts {
		if l.Name == st.Context && (latest == nil || l.ID > latest.ID) {
			latest = l
		}
	}
	if latest != nil && latest.Status == string(want) && latest.Description == st.Description && latest.TargetURL == st.TargetURL {
		return nil
	}
	if err := rp.before(); err != nil {
		return err
	}
	opts := &gl.SetCommitStatusOptions{State: want, Name: gl.Ptr(st.Context), Description: gl.Ptr(st.Description)}
	if st.TargetURL != "" {
		opts.TargetURL = gl.Ptr(st.TargetURL)
	}
	_, resp, err = rp.client.Commits.SetCommitStatus(pid, sha, opts, gl.WithContext(ctx))
	if err != nil && resp != nil && resp.StatusCode == http.StatusBadRequest && latest != nil &&
		latest.Status == string(want) && strings.Contains(err.Error(), "Cannot transition status") {
		return nil
	}
	if err := rp.after(resp, err); err != nil {
		return fmt.Errorf("set commit status %s on %s@%s: %w", st.Context, repository, short(sha), err)
	}
	return nil
}

// UpsertComment keeps exactly one note carrying marker on the merge
// request, written by the provider's own identity (the token's user): found
// once by listing the notes, then edited in place. A note carrying the
// marker written by anyone else is never edited, nor taken for sync's:
// anyone may paste the marker into a note of their own.
func (rp *reporter) UpsertComment(ctx context.Context, repository string, number int, marker, body string) error {
	pid, err := project(repository)
	if err != nil {
		return err
	}
	self, err := rp.Self(ctx)
	if err != nil {
		return err
	}
	list := func(ctx context.Context) ([]provider.Comment, error) {
		return rp.notes.ListComments(ctx, repository, number)
	}
	return rp.comments.Upsert(ctx, repository, number, body, forge.CommentCalls{
		Self:   self,
		Find:   forge.FindOwn(list, self, marker),
		Before: rp.before,
		Edit: func(ctx context.Context, id int64, body string) (int64, error) {
			n, resp, err := rp.client.Notes.UpdateMergeRequestNote(pid, int64(number), id,
				&gl.UpdateMergeRequestNoteOptions{Body: gl.Ptr(body)}, gl.WithContext(ctx))
			if err := rp.after(resp, err); err != nil {
				return 0, fmt.Errorf("edit note on %s!%d: %w", repository, number, err)
			}
			return n.ID, nil
		},
		Create: func(ctx context.Context, body string) (int64, error) {
			n, resp, err := rp.client.Notes.CreateMergeRequestNote(pid, int64(number),
				&gl.CreateMergeRequestNoteOptions{Body: gl.Ptr(body)}, gl.WithContext(ctx))
			if err := rp.after(resp, err); err != nil {
				return 0, fmt.Errorf("create note on %s!%d: %w", repository, number, err)
			}
			rp.notes.rememberNote(repository, n.ID, number)
			return n.ID, nil
		},
	})
}

// ForgetPullRequest implements provider.Forgetter: the note of a merge
// request is found again by listing, should it be needed, and the merge
// request of its notes is forgotten.
func (p *Provider) ForgetPullRequest(repository string, number int) {
	p.comments.ForgetPullRequest(repository, number)
	p.notes.forgetPullRequest(repository, number)
}

// ForgetRepository implements provider.Forgetter: what is remembered of a
// repository's merge requests and notes goes.
func (p *Provider) ForgetRepository(repository string) {
	p.comments.ForgetRepository(repository)
	p.mergeRequests.forgetRepository(repository)
	p.notes.forgetRepository(repository)
}
