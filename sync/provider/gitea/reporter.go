// The reporter: commit statuses and the one comment edited in place
// (provider.Reporter). Gitea has no deployments: those methods answer
// ErrNoDeployments.

package gitea

import (
	"context"
	"fmt"

	sdk "code.gitea.io/sdk/gitea"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/provider/internal/forge"
)

// SetCommitStatus posts a commit status, unless the context's latest status
// already says the same (a restarted sync does not repeat it).
func (p *Provider) SetCommitStatus(ctx context.Context, repository, sha string, st provider.CommitStatus) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	c, err := p.api(ctx)
	if err != nil {
		return err
	}
	combined, resp, err := c.GetCombinedStatus(owner, name, sha)
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("read commit statuses of %s@%s: %w", repository, sha, err)
	}
	for _, l := range combined.Statuses {
		if l.Context == st.Context && string(l.State) == st.State && l.Description == st.Description && l.TargetURL == st.TargetURL {
			return nil
		}
	}
	if c, err = p.api(ctx); err != nil {
		return err
	}
	_, resp, err = c.CreateStatus(owner, name, sha, sdk.CreateStatusOption{
		State: sdk.StatusState(st.State), Context: st.Context, Description: st.Description, TargetURL: st.TargetURL,
	})
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("set commit status %s on %s@%s: %w", st.Context, repository, sha, err)
	}
	return nil
}

// UpsertComment keeps exactly one comment carrying marker on the pull
// request, written by the provider's own identity (the token's user): found
// once by listing the comments, then edited in place. A comment carrying
// the marker written by anyone else is never edited, nor taken for sync's:
// anyone may paste the marker into a comment of their own.
func (p *Provider) UpsertComment(ctx context.Context, repository string, number int, marker, body string) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	self, err := p.Self(ctx)
	if err != nil {
		return err
	}
	return p.comments.Upsert(ctx, repository, number, body, forge.CommentCalls{
		Self: self,
		Find: forge.FindOwn(func(ctx context.Context) ([]provider.Comment, error) { return p.ListComments(ctx, repository, number) }, self, marker),
		Edit: func(ctx context.Context, id int64, body string) (int64, error) {
			c, err := p.api(ctx)
			if err != nil {
				return 0, err
			}
			edited, resp, err := c.EditIssueComment(owner, name, id, sdk.EditIssueCommentOption{Body: body})
			if err := p.after(resp, err); err != nil {
				return 0, fmt.Errorf("edit comment on %s#%d: %w", repository, number, err)
			}
			return edited.ID, nil
		},
		Create: func(ctx context.Context, body string) (int64, error) {
			c, err := p.api(ctx)
			if err != nil {
				return 0, err
			}
			created, resp, err := c.CreateIssueComment(owner, name, int64(number), sdk.CreateIssueCommentOption{Body: body})
			if err := p.after(resp, err); err != nil {
				return 0, fmt.Errorf("create comment on %s#%d: %w", repository, number, err)
			}
			return created.ID, nil
		},
	})
}

// ForgetPullRequest implements provider.Forgetter: the comment of a pull
// request is found again by listing, should it be needed.
func (p *Provider) ForgetPullRequest(repository string, number int) {
	p.comments.ForgetPullRequest(repository, number)
}

// ForgetRepository implements provider.Forgetter.
func (p *Provider) ForgetRepository(repository string) { p.comments.ForgetRepository(repository) }

// FindDeployment is ErrNoDeployments: Gitea has no Deployments API.
func (p *Provider) FindDeployment(context.Context, string, string, string) (int64, error) {
	return 0, ErrNoDeployments
}

// CreateDeployment is ErrNoDeployments: Gitea has no Deployments API.
func (p *Provider) CreateDeployment(context.Context, string, provider.Deployment) (int64, error) {
	return 0, ErrNoDeployments
}

// SetDeploymentStatus is ErrNoDeployments: Gitea has no Deployments API.
func (p *Provider) SetDeploymentStatus(context.Context, string, int64, provider.DeploymentStatus) error {
	return ErrNoDeployments
}
