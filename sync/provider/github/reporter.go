// The reporter: commit statuses, the one comment edited in place, and
// deployments with their statuses (provider.Reporter).

package github

import (
	"context"
	"fmt"
	"strings"
	"sync"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/provider/internal/forge"
)

// SetCommitStatus posts a commit status; the description is cut to GitHub's
// 140 characters.
func (p *Provider) SetCommitStatus(ctx context.Context, repository, sha string, st provider.CommitStatus) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	if err := p.before(); err != nil {
		return err
	}
	desc := st.Description
	if r := []rune(desc); len(r) > 140 {
		desc = string(r[:139]) + "…"
	}
	key := postedKey{repository, sha, st.Context}
	want := provider.CommitStatus{State: st.State, Context: st.Context, Description: desc, TargetURL: st.TargetURL}
	last, known := p.posted.get(key)
	if known && last == want {
		return nil
	}
	if !known {
		if err := p.beforeWrite(); err != nil {
			return err
		}
		// A restarted sync does not repeat the status GitHub already
		// shows: the latest status of the context is read first. Once this
		// process has posted the context's status on the commit, the
		// latest is that one (only the leader posts), and no read is made;
		// nor for a commit the caller saw become a head (NewCommit).
		same, err := p.latestIs(ctx, repository, owner, name, sha, want)
		if err != nil || same {
			if same {
				p.posted.put(key, want)
			}
			return err
		}
	}
	status := &gh.RepoStatus{State: gh.String(st.State), Context: gh.String(st.Context), Description: gh.String(desc)}
	if st.TargetURL != "" {
		status.TargetURL = gh.String(st.TargetURL)
	}
	_, resp, err := p.client.Repositories.CreateStatus(ctx, owner, name, sha, status)
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("set commit status %s on %s@%s: %w", st.Context, repository, sha, err)
	}
	p.posted.put(key, want)
	return nil
}

// NewCommit implements provider.NewCommits: the first status of context on
// sha is posted without reading the commit's statuses first.
func (p *Provider) NewCommit(repository, sha, context string) {
	p.posted.putNew(postedKey{repository, sha, context})
}

// latestIs reads the commit's statuses and reports whether the latest of
// want's context is want.
func (p *Provider) latestIs(ctx context.Context, repository, owner, name, sha string, want provider.CommitStatus) (bool, error) {
	latest, resp, err := p.client.Repositories.ListStatuses(ctx, owner, name, sha, &gh.ListOptions{PerPage: 100})
	if err := p.after(resp, err); err != nil {
		return false, fmt.Errorf("read commit statuses of %s@%s: %w", repository, sha, err)
	}
	for _, l := range latest { // newest first
		if l.GetContext() == want.Context {
			return l.GetState() == want.State && l.GetDescription() == want.Description && l.GetTargetURL() == want.TargetURL, nil
		}
	}
	return false, nil
}

// postedKey names a commit status: repository, commit and context.
type postedKey struct{ repo, sha, context string }

// maxPosted bounds the statuses remembered; when full the memory starts
// again (the next status of each commit then reads GitHub first).
const maxPosted = 8192

// postedStatuses are the statuses this process posted, the latest per
// commit and context.
type postedStatuses struct {
	mu sync.Mutex
	m  map[postedKey]provider.CommitStatus
}

func (ps *postedStatuses) get(k postedKey) (provider.CommitStatus, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st, ok := ps.m[k]
	return st, ok
}

func (ps *postedStatuses) put(k postedKey, st provider.CommitStatus) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil || len(ps.m) >= maxPosted {
		ps.m = map[postedKey]provider.CommitStatus{}
	}
	ps.m[k] = st
}

// putNew remembers that nothing is posted on k, unless a status is
// known: the zero status, which no status to post equals.
func (ps *postedStatuses) putNew(k postedKey) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, known := ps.m[k]; known {
		return
	}
	if ps.m == nil || len(ps.m) >= maxPosted {
		ps.m = map[postedKey]provider.CommitStatus{}
	}
	ps.m[k] = provider.CommitStatus{}
}

// forget drops what is remembered of a repository.
func (ps *postedStatuses) forget(repository string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for k := range ps.m {
		if k.repo == repository {
			delete(ps.m, k)
		}
	}
}

// UpsertComment keeps exactly one comment carrying marker on the pull
// request: found once by listing the comments, then edited in place.
func (p *Provider) UpsertComment(ctx context.Context, repository string, number int, marker, body string) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	return p.comments.Upsert(ctx, repository, number, body, forge.CommentCalls{
		Find: func(ctx context.Context) (forge.CommentRef, bool, error) {
			return p.findComment(ctx, repository, owner, name, number, marker)
		},
		Before: p.before,
		Edit: func(ctx context.Context, id int64, body string) (int64, error) {
			c, resp, err := p.client.Issues.EditComment(ctx, owner, name, id, &gh.IssueComment{Body: gh.String(body)})
			if err := p.after(resp, err); err != nil {
				return 0, fmt.Errorf("edit comment on %s#%d: %w", repository, number, err)
			}
			return c.GetID(), nil
		},
		Create: func(ctx context.Context, body string) (int64, error) {
			c, resp, err := p.client.Issues.CreateComment(ctx, owner, name, number, &gh.IssueComment{Body: gh.String(body)})
			if err := p.after(resp, err); err != nil {
				return 0, fmt.Errorf("create comment on %s#%d: %w", repository, number, err)
			}
			return c.GetID(), nil
		},
	})
}

// findComment lists a pull request's comments, page by page until it
// finds sync's own (forge.IsOwn).
func (p *Provider) findComment(ctx context.Context, repository, owner, name string, number int, marker string) (forge.CommentRef, bool, error) {
	self, err := p.Login(ctx)
	if err != nil {
		return forge.CommentRef{}, false, fmt.Errorf("comment on %s#%d: %w", repository, number, err)
	}
	// Looked for to be written: not while the write could not be sent.
	if err := p.beforeWrite(); err != nil {
		return forge.CommentRef{}, false, err
	}
	opts := &gh.IssueListCommentsOptions{ListOptions: gh.ListOptions{PerPage: 100}}
	for {
		if err := p.before(); err != nil {
			return forge.CommentRef{}, false, err
		}
		cs, resp, err := p.client.Issues.ListComments(ctx, owner, name, number, opts)
		if err := p.after(resp, err); err != nil {
			return forge.CommentRef{}, false, fmt.Errorf("list comments of %s#%d: %w", repository, number, err)
		}
		for _, c := range cs {
			if forge.IsOwn(c.GetUser().GetLogin(), c.GetBody(), self, marker) {
				return forge.CommentRef{ID: c.GetID(), Body: c.GetBody()}, true, nil
			}
		}
		if resp.NextPage == 0 {
			return forge.CommentRef{}, false, nil
		}
		opts.Page = resp.NextPage
	}
}

// ForgetPullRequest implements provider.Forgetter: the comment of a
// pull request is found again by listing, should it be needed.
func (p *Provider) ForgetPullRequest(repository string, number int) {
	p.comments.ForgetPullRequest(repository, number)
}

// ForgetRepository implements provider.Forgetter.
func (p *Provider) ForgetRepository(repository string) {
	p.comments.ForgetRepository(repository)
	p.posted.forget(repository)
}

// FindDeployment returns the newest deployment of sha to environment that
// sync's credentials created; 0 when there is none. A deployment someone
// else made to that environment (by hand, another tool) is theirs: sync
// never drives, deactivates or adopts it. Among the newest deploymentPage
// of that commit and environment.
func (p *Provider) FindDeployment(ctx context.Context, repository, sha, environment string) (int64, error) {
	owner, name, err := split(repository)
	if err != nil {
		return 0, err
	}
	self, err := p.Login(ctx)
	if err != nil {
		return 0, err
	}
	if err := p.before(); err != nil {
		return 0, err
	}
	ds, resp, err := p.client.Repositories.ListDeployments(ctx, owner, name, &gh.DeploymentsListOptions{SHA: sha, Environment: environment, ListOptions: gh.ListOptions{PerPage: deploymentPage}})
	if err := p.after(resp, err); err != nil {
		return 0, fmt.Errorf("list deployments of %s to %s: %w", repository, environment, err)
	}
	for _, d := range ds {
		if strings.EqualFold(d.GetCreator().GetLogin(), self) {
			return d.GetID(), nil
		}
	}
	return 0, nil
}

// deploymentPage is how many deployments of one commit to one environment
// FindDeployment reads: sync makes one per commit, so more are others'.
const deploymentPage = 10

// CreateDeployment creates a transient, non-production deployment of a
// commit that waits for no status check (required_contexts empty) and
// merges nothing (auto_merge false).
func (p *Provider) CreateDeployment(ctx context.Context, repository string, d provider.Deployment) (int64, error) {
	owner, name, err := split(repository)
	if err != nil {
		return 0, err
	}
	if err := p.before(); err != nil {
		return 0, err
	}
	none := []string{}
	dep, resp, err := p.client.Repositories.CreateDeployment(ctx, owner, name, &gh.DeploymentRequest{
		Ref: gh.String(d.SHA), Task: gh.String("deploy"), AutoMerge: gh.Bool(false), RequiredContexts: &none,
		Environment: gh.String(d.Environment), Description: gh.String(cut(d.Description)),
		TransientEnvironment: gh.Bool(true), ProductionEnvironment: gh.Bool(false),
	})
	if err := p.after(resp, err); err != nil {
		return 0, fmt.Errorf("create deployment of %s to %s: %w", repository, d.Environment, err)
	}
	return dep.GetID(), nil
}

// SetDeploymentStatus posts a deployment status; the description is cut to
// GitHub's 140 characters.
func (p *Provider) SetDeploymentStatus(ctx context.Context, repository string, id int64, st provider.DeploymentStatus) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	if err := p.before(); err != nil {
		return err
	}
	req := &gh.DeploymentStatusRequest{State: gh.String(st.State), Description: gh.String(cut(st.Description))}
	if st.EnvironmentURL != "" {
		req.EnvironmentURL = gh.String(st.EnvironmentURL)
	}
	if st.LogURL != "" {
		req.LogURL = gh.String(st.LogURL)
	}
	_, resp, err := p.client.Repositories.CreateDeploymentStatus(ctx, owner, name, id, req)
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("set status %s of deployment %d on %s: %w", st.State, id, repository, err)
	}
	return nil
}

// cut shortens a description to GitHub's 140 characters.
func cut(s string) string {
	if r := []rune(s); len(r) > 140 {
		return string(r[:139]) + "…"
	}
	return s
}
