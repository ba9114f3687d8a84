package github

// The calls of the pull-request lifecycle: comment listings (commands and
// sync's own state), reactions, collaborator permissions, deployments and
// deployment statuses.

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/provider"
)

// ListComments lists a pull request's comments, 100 per page, each page a
// conditional request.
func (p *Provider) ListComments(ctx context.Context, repository string, number int) ([]provider.Comment, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	out, err := p.listComments(ctx, owner, name, number, &gh.IssueListCommentsOptions{ListOptions: gh.ListOptions{PerPage: 100}})
	if err != nil {
		return nil, fmt.Errorf("list comments of %s#%d: %w", repository, number, err)
	}
	return out, nil
}

// ListRepositoryComments lists the comments of every issue and pull
// request updated at or after since (to the second, so that the same since
// is the same URL and its listing a conditional request).
func (p *Provider) ListRepositoryComments(ctx context.Context, repository string, since time.Time) ([]provider.Comment, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	t := since.UTC().Truncate(time.Second)
	opts := &gh.IssueListCommentsOptions{Sort: gh.String("created"), Direction: gh.String("asc"), Since: &t, ListOptions: gh.ListOptions{PerPage: 100}}
	out, err := p.listComments(ctx, owner, name, 0, opts)
	if err != nil {
		return nil, fmt.Errorf("list comments of %s since %s: %w", repository, t.Format(time.RFC3339), err)
	}
	return out, nil
}

func (p *Provider) listComments(ctx context.Context, owner, name string, number int, opts *gh.IssueListCommentsOptions) ([]provider.Comment, error) {
	var out []provider.Comment
	for {
		if err := p.before(); err != nil {
			return nil, err
		}
		cs, resp, err := p.client.Issues.ListComments(ctx, owner, name, number, opts)
		if err := p.after(resp, err); err != nil {
			return nil, err
		}
		for _, c := range cs {
			n := number
			if n == 0 {
				n = issueNumber(c.GetIssueURL())
			}
			out = append(out, provider.Comment{ID: c.GetID(), Number: n, Author: c.GetUser().GetLogin(), Body: c.GetBody(),
				CreatedAt: c.GetCreatedAt().Time, UpdatedAt: c.GetUpdatedAt().Time})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// issueNumber reads the number at the end of an issue_url; 0 when there is
// none.
func issueNumber(issueURL string) int {
	u, err := url.Parse(issueURL)
	if err != nil {
		return 0
	}
	i := strings.LastIndex(u.Path, "/")
	n, err := strconv.Atoi(u.Path[i+1:])
	if err != nil {
		return 0
	}
	return n
}

// React leaves a reaction on an issue comment. GitHub answers 200 with the
// existing reaction when the same one is left twice.
func (p *Provider) React(ctx context.Context, repository string, commentID int64, reaction string) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	if err := p.before(); err != nil {
		return err
	}
	_, resp, err := p.client.Reactions.CreateIssueCommentReaction(ctx, owner, name, commentID, reaction)
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("react %s to comment %d on %s: %w", reaction, commentID, repository, err)
	}
	return nil
}

// Permission reads a user's permission on a repository (a conditional
// request).
func (p *Provider) Permission(ctx context.Context, repository, user string) (string, error) {
	owner, name, err := split(repository)
	if err != nil {
		return "", err
	}
	if err := p.before(); err != nil {
		return "", err
	}
	lvl, resp, err := p.client.Repositories.GetPermissionLevel(ctx, owner, name, user)
	if err := p.after(resp, err); err != nil {
		return "", fmt.Errorf("permission of %s on %s: %w", user, repository, err)
	}
	return lvl.GetPermission(), nil
}

// FindDeployment returns the newest deployment of sha to environment.
func (p *Provider) FindDeployment(ctx context.Context, repository, sha, environment string) (int64, error) {
	owner, name, err := split(repository)
	if err != nil {
		return 0, err
	}
	if err := p.before(); err != nil {
		return 0, err
	}
	ds, resp, err := p.client.Repositories.ListDeployments(ctx, owner, name, &gh.DeploymentsListOptions{SHA: sha, Environment: environment, ListOptions: gh.ListOptions{PerPage: 1}})
	if err := p.after(resp, err); err != nil {
		return 0, fmt.Errorf("list deployments of %s to %s: %w", repository, environment, err)
	}
	if len(ds) == 0 {
		return 0, nil
	}
	return ds[0].GetID(), nil
}

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
