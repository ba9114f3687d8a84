// The pull-request source: open pull requests listed page by page, one read
// on its own, and the gate of a head commit from its commit statuses
// (provider.PullRequestSource).

package gitea

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	sdk "code.gitea.io/sdk/gitea"

	"github.com/petri-dev/petri/sync/provider"
)

// pageSize is Gitea's default MAX_RESPONSE_ITEMS: a larger limit is cut to
// it by the server.
const pageSize = 50

// ListOpenPullRequests lists open pull requests, 50 per page.
func (p *Provider) ListOpenPullRequests(ctx context.Context, repository string) ([]provider.PullRequest, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	var out []provider.PullRequest
	for page := 1; ; page++ {
		c, err := p.api(ctx)
		if err != nil {
			return nil, err
		}
		prs, resp, err := c.ListRepoPullRequests(owner, name, sdk.ListPullRequestsOptions{
			State: sdk.StateOpen, ListOptions: sdk.ListOptions{Page: page, PageSize: pageSize},
		})
		if err := p.after(resp, err); err != nil {
			return nil, fmt.Errorf("list pull requests of %s: %w", repository, err)
		}
		for _, pr := range prs {
			out = append(out, convert(repository, pr))
		}
		if lastPage(resp, len(prs), len(out)) {
			return out, nil
		}
	}
}

// lastPage tells whether a page is the last: by Gitea's Link header, else
// by its X-Total-Count (some listings send only that), else by a short
// page. fetched counts the items of this page and those before.
func lastPage(resp *sdk.Response, n, fetched int) bool {
	if n == 0 {
		return true
	}
	if resp != nil && resp.Response != nil {
		if resp.Header.Get("Link") != "" {
			return resp.NextPage == 0
		}
		if total, err := strconv.Atoi(resp.Header.Get("X-Total-Count")); err == nil {
			return fetched >= total
		}
	}
	return n < pageSize
}

// GetPullRequest reads one pull request.
func (p *Provider) GetPullRequest(ctx context.Context, repository string, number int) (provider.PullRequest, error) {
	owner, name, err := split(repository)
	if err != nil {
		return provider.PullRequest{}, err
	}
	c, err := p.api(ctx)
	if err != nil {
		return provider.PullRequest{}, err
	}
	pr, resp, err := c.GetPullRequest(owner, name, int64(number))
	if err := p.after(resp, err); err != nil {
		return provider.PullRequest{}, fmt.Errorf("get pull request %s#%d: %w", repository, number, err)
	}
	return convert(repository, pr), nil
}

// workInProgressPrefixes are Gitea's default [repository.pull-request]
// WORK_IN_PROGRESS_PREFIXES: Gitea has no draft flag of its own; a pull
// request whose title starts with one (in any case) is a draft, which
// Gitea also reports as draft in its API.
var workInProgressPrefixes = []string{"WIP:", "[WIP]"}

// IsDraftTitle reports whether a title marks a pull request as work in
// progress the way Gitea does by default.
func IsDraftTitle(title string) bool {
	for _, prefix := range workInProgressPrefixes {
		if len(title) >= len(prefix) && strings.EqualFold(title[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

func convert(repository string, pr *sdk.PullRequest) provider.PullRequest {
	out := provider.PullRequest{
		Repository: repository,
		Number:     int(pr.Index),
		State:      string(pr.State),
		Merged:     pr.HasMerged || pr.Merged != nil,
		// A server with other prefixes configured says so in draft.
		Draft: pr.Draft || IsDraftTitle(pr.Title),
		Title: pr.Title,
		URL:   pr.HTMLURL,
	}
	if pr.Poster != nil {
		out.Author = pr.Poster.UserName
	}
	// For a pull request from a fork, the head branch is the fork's.
	if pr.Head != nil {
		out.HeadBranch, out.HeadSHA = pr.Head.Ref, pr.Head.Sha
	}
	if pr.Base != nil {
		out.BaseBranch = pr.Base.Ref
	}
	out.Fork = isFork(pr.Head, pr.Base)
	if pr.Created != nil {
		out.CreatedAt = *pr.Created
	}
	if pr.Updated != nil {
		out.UpdatedAt = *pr.Updated
	}
	for _, l := range pr.Labels {
		out.Labels = append(out.Labels, l.Name)
	}
	return out
}

// GateState reads a commit status context on a commit: its latest status,
// as Gitea's combined status holds it. Success passes; failure, error and
// warning fail (Gitea's own required status checks pass on success only);
// pending, skipped or none yet wait. A gate naming a check run is
// ErrNoCheckRuns.
func (p *Provider) GateState(ctx context.Context, repository, sha string, gate provider.Gate) (provider.GateState, string, error) {
	if gate.CheckRun != "" {
		return "", "", fmt.Errorf("gate %s on %s: %w", gate, repository, ErrNoCheckRuns)
	}
	owner, name, err := split(repository)
	if err != nil {
		return "", "", err
	}
	short := sha
	if len(short) > 7 {
		short = short[:7]
	}
	c, err := p.api(ctx)
	if err != nil {
		return "", "", err
	}
	res, resp, err := c.GetCombinedStatus(owner, name, sha)
	if err := p.after(resp, err); err != nil {
		return "", "", fmt.Errorf("statuses of %s@%s: %w", repository, short, err)
	}
	for _, st := range res.Statuses {
		if st.Context != gate.StatusContext {
			continue
		}
		switch st.State {
		case sdk.StatusSuccess:
			return provider.GatePassed, fmt.Sprintf("status %s succeeded on %s", gate.StatusContext, short), nil
		case sdk.StatusFailure, sdk.StatusError, sdk.StatusWarning:
			return provider.GateFailed, fmt.Sprintf("status %s is %s on %s", gate.StatusContext, st.State, short), nil
		}
		return provider.GatePending, fmt.Sprintf("status %s is %s on %s", gate.StatusContext, st.State, short), nil
	}
	return provider.GatePending, fmt.Sprintf("waiting for status %s on %s", gate.StatusContext, short), nil
}

// isFork reports whether a pull request's head is in another repository
// than its base; a side Gitea no longer shows (a deleted fork) counts as
// another.
func isFork(head, base *sdk.PRBranchInfo) bool {
	if head == nil || base == nil {
		return true
	}
	if head.RepoID != 0 || base.RepoID != 0 {
		return head.RepoID != base.RepoID
	}
	return head.Repository == nil || base.Repository == nil || !strings.EqualFold(head.Repository.FullName, base.Repository.FullName)
}
