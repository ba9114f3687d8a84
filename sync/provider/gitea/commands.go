// The command reader: comment listings (commands and sync's own comment),
// reactions, collaborator permissions (provider.CommandReader).

package gitea

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	sdk "code.gitea.io/sdk/gitea"

	"github.com/petri-dev/petri/sync/provider"
)

// ListComments lists a pull request's comments, oldest first. Gitea
// answers them all at once: this listing has no pages.
func (p *Provider) ListComments(ctx context.Context, repository string, number int) ([]provider.Comment, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	out, err := p.listComments(ctx, number, false, func(c *sdk.Client, _ int) ([]*sdk.Comment, *sdk.Response, error) {
		return c.ListIssueComments(owner, name, int64(number), sdk.ListIssueCommentOptions{})
	})
	if err != nil {
		return nil, fmt.Errorf("list comments of %s#%d: %w", repository, number, err)
	}
	return out, nil
}

// ListRepositoryComments lists the comments on every issue and pull request
// of a repository updated at or after since (to the second), oldest first,
// 50 per page.
func (p *Provider) ListRepositoryComments(ctx context.Context, repository string, since time.Time) ([]provider.Comment, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	t := since.UTC().Truncate(time.Second)
	out, err := p.listComments(ctx, 0, true, func(c *sdk.Client, page int) ([]*sdk.Comment, *sdk.Response, error) {
		return c.ListRepoIssueComments(owner, name, sdk.ListIssueCommentOptions{Since: t, ListOptions: sdk.ListOptions{Page: page, PageSize: pageSize}})
	})
	if err != nil {
		return nil, fmt.Errorf("list comments of %s since %s: %w", repository, t.Format(time.RFC3339), err)
	}
	return out, nil
}

func (p *Provider) listComments(ctx context.Context, number int, paged bool, list func(*sdk.Client, int) ([]*sdk.Comment, *sdk.Response, error)) ([]provider.Comment, error) {
	var out []provider.Comment
	for page := 1; ; page++ {
		c, err := p.api(ctx)
		if err != nil {
			return nil, err
		}
		cs, resp, err := list(c, page)
		if err := p.after(resp, err); err != nil {
			return nil, err
		}
		for _, c := range cs {
			out = append(out, convertComment(c, number))
		}
		if !paged || lastPage(resp, len(cs), len(out)) {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b provider.Comment) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// convertComment converts a comment; number, when 0, is read from the
// comment's issue or pull-request URL.
func convertComment(c *sdk.Comment, number int) provider.Comment {
	if number == 0 {
		if number = issueNumber(c.IssueURL); number == 0 {
			number = issueNumber(c.PRURL)
		}
	}
	out := provider.Comment{ID: c.ID, Number: number, Body: c.Body, CreatedAt: c.Created, UpdatedAt: c.Updated}
	if c.Poster != nil {
		out.Author = c.Poster.UserName
	}
	return out
}

// issueNumber reads the number at the end of an issue or pull-request URL
// (…/owner/name/issues/7, …/owner/name/pulls/7); 0 when there is none.
func issueNumber(u string) int {
	parsed, err := url.Parse(u)
	if err != nil {
		return 0
	}
	path := strings.TrimSuffix(parsed.Path, "/")
	n, err := strconv.Atoi(path[strings.LastIndex(path, "/")+1:])
	if err != nil {
		return 0
	}
	return n
}

// React leaves a reaction on a comment. Gitea answers 200 with the existing
// reaction when the same one is left twice.
func (p *Provider) React(ctx context.Context, repository string, commentID int64, reaction string) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	c, err := p.api(ctx)
	if err != nil {
		return err
	}
	_, resp, err := c.PostIssueCommentReaction(owner, name, commentID, reaction)
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("react %s to comment %d on %s: %w", reaction, commentID, repository, err)
	}
	return nil
}

// Permission reads a user's permission on a repository. Gitea's owner is
// an admin; a user with no access at all, or none granted on a public
// repository beyond reading it, is none or read as Gitea says. A user Gitea
// does not know (404) has none: an account deleted after it commented,
// whose comments Gitea shows as Ghost's. Gitea answers this only to a
// repository administrator or a site administrator: the provider's identity
// must be one.
func (p *Provider) Permission(ctx context.Context, repository, user string) (string, error) {
	owner, name, err := split(repository)
	if err != nil {
		return "", err
	}
	c, err := p.api(ctx)
	if err != nil {
		return "", err
	}
	res, resp, err := c.CollaboratorPermission(owner, name, user)
	if err := p.after(resp, err); err != nil {
		if errors.Is(err, provider.ErrNotFound) {
			return provider.PermissionNone, nil
		}
		return "", fmt.Errorf("permission of %s on %s: %w", user, repository, err)
	}
	if res == nil {
		return "", fmt.Errorf("permission of %s on %s: gitea answered %d", user, repository, resp.StatusCode)
	}
	return permission(res.Permission), nil
}

// permission maps Gitea's access modes onto provider.Permission*.
func permission(m sdk.AccessMode) string {
	switch m {
	case sdk.AccessModeOwner, sdk.AccessModeAdmin:
		return provider.PermissionAdmin
	case sdk.AccessModeWrite:
		return provider.PermissionWrite
	case sdk.AccessModeRead:
		return provider.PermissionRead
	}
	return provider.PermissionNone
}
