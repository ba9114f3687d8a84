// The command reader: comment listings (commands and sync's own state),
// reactions, collaborator permissions (provider.CommandReader).

package github

import (
	"context"
	"errors"
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
// request). A user GitHub does not know (404: a deleted account, a login
// that is no user's) has none.
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
		if errors.Is(err, provider.ErrNotFound) {
			return provider.PermissionNone, nil
		}
		return "", fmt.Errorf("permission of %s on %s: %w", user, repository, err)
	}
	return lvl.GetPermission(), nil
}
