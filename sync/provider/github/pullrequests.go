// The pull-request source: open pull requests listed page by page, one read
// on its own, and the CI gate of a head commit (provider.PullRequestSource).

package github

import (
	"context"
	"fmt"
	"strings"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/provider"
)

// ListOpenPullRequests lists open pull requests, 100 per page, each page a
// conditional request.
func (p *Provider) ListOpenPullRequests(ctx context.Context, repository string) ([]provider.PullRequest, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	opts := &gh.PullRequestListOptions{State: "open", ListOptions: gh.ListOptions{PerPage: 100}}
	var out []provider.PullRequest
	for {
		if err := p.before(); err != nil {
			return nil, err
		}
		prs, resp, err := p.client.PullRequests.List(ctx, owner, name, opts)
		if err := p.after(resp, err); err != nil {
			return nil, fmt.Errorf("list pull requests of %s: %w", repository, err)
		}
		for _, pr := range prs {
			out = append(out, convert(repository, pr))
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// GetPullRequest reads one pull request.
func (p *Provider) GetPullRequest(ctx context.Context, repository string, number int) (provider.PullRequest, error) {
	owner, name, err := split(repository)
	if err != nil {
		return provider.PullRequest{}, err
	}
	if err := p.before(); err != nil {
		return provider.PullRequest{}, err
	}
	pr, resp, err := p.client.PullRequests.Get(ctx, owner, name, number)
	if err := p.after(resp, err); err != nil {
		return provider.PullRequest{}, fmt.Errorf("get pull request %s#%d: %w", repository, number, err)
	}
	return convert(repository, pr), nil
}

func convert(repository string, pr *gh.PullRequest) provider.PullRequest {
	out := provider.PullRequest{
		Repository: repository,
		Number:     pr.GetNumber(),
		State:      pr.GetState(),
		Merged:     pr.GetMerged() || pr.MergedAt != nil,
		Draft:      pr.GetDraft(),
		Title:      pr.GetTitle(),
		Author:     pr.GetUser().GetLogin(),
		HeadBranch: pr.GetHead().GetRef(),
		HeadSHA:    pr.GetHead().GetSHA(),
		BaseBranch: pr.GetBase().GetRef(),
		URL:        pr.GetHTMLURL(),
		CreatedAt:  pr.GetCreatedAt().Time,
		UpdatedAt:  pr.GetUpdatedAt().Time,
		// A head repository GitHub no longer shows (a deleted fork) is
		// taken as a fork: nothing says it is the repository's own.
		Fork: !strings.EqualFold(pr.GetHead().GetRepo().GetFullName(), repository),
	}
	for _, l := range pr.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	return out
}

// FromEvent converts the pull request of a webhook payload.
func FromEvent(repository string, pr *gh.PullRequest) provider.PullRequest {
	return convert(repository, pr)
}

// GateState reads a check run (latest run of that name) or a status context
// on a commit.
func (p *Provider) GateState(ctx context.Context, repository, sha string, gate provider.Gate) (provider.GateState, string, error) {
	owner, name, err := split(repository)
	if err != nil {
		return "", "", err
	}
	if err := p.before(); err != nil {
		return "", "", err
	}
	short := sha
	if len(short) > 7 {
		short = short[:7]
	}
	if gate.CheckRun != "" {
		res, resp, err := p.client.Checks.ListCheckRunsForRef(ctx, owner, name, sha, &gh.ListCheckRunsOptions{
			CheckName: gh.String(gate.CheckRun), Filter: gh.String("latest"), ListOptions: gh.ListOptions{PerPage: 100},
		})
		if err := p.after(resp, err); err != nil {
			return "", "", fmt.Errorf("check runs of %s@%s: %w", repository, short, err)
		}
		return checkRunsState(res.CheckRuns, gate, short)
	}
	res, resp, err := p.client.Repositories.GetCombinedStatus(ctx, owner, name, sha, &gh.ListOptions{PerPage: 100})
	if err := p.after(resp, err); err != nil {
		return "", "", fmt.Errorf("statuses of %s@%s: %w", repository, short, err)
	}
	for _, st := range res.Statuses {
		if st.GetContext() != gate.StatusContext {
			continue
		}
		switch st.GetState() {
		case "success":
			return provider.GatePassed, fmt.Sprintf("status %s succeeded on %s", gate.StatusContext, short), nil
		case "failure", "error":
			return provider.GateFailed, fmt.Sprintf("status %s is %s on %s", gate.StatusContext, st.GetState(), short), nil
		}
		return provider.GatePending, fmt.Sprintf("waiting for status %s on %s", gate.StatusContext, short), nil
	}
	return provider.GatePending, fmt.Sprintf("waiting for status %s on %s", gate.StatusContext, short), nil
}

// checkRunsState is the gate's state from the runs of its name: only
// those of the gate's app when it names one, since any app (and a fork's
// workflow) can post a run of any name.
func checkRunsState(runs []*gh.CheckRun, gate provider.Gate, short string) (provider.GateState, string, error) {
	name := gate.CheckRun
	if gate.App != "" {
		name += " of app " + gate.App
	}
	state, reason := provider.GatePending, fmt.Sprintf("waiting for check run %s on %s", name, short)
	for _, r := range runs {
		if r.GetName() != gate.CheckRun || r.GetStatus() != "completed" {
			continue
		}
		if gate.App != "" && r.GetApp().GetSlug() != gate.App {
			continue
		}
		switch r.GetConclusion() {
		case "success":
			return provider.GatePassed, fmt.Sprintf("check run %s succeeded on %s", name, short), nil
		case "neutral", "skipped", "stale":
		default:
			state, reason = provider.GateFailed, fmt.Sprintf("check run %s concluded %s on %s", name, r.GetConclusion(), short)
		}
	}
	return state, reason, nil
}

// LabelAdders reads the pull request's issue events (oldest first, 100 a
// page) and returns the actor of the last labeled event of each label
// (provider.LabelHistory).
func (p *Provider) LabelAdders(ctx context.Context, repository string, number int) (map[string]string, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	opts := &gh.ListOptions{PerPage: 100}
	adders := map[string]string{}
	for {
		if err := p.before(); err != nil {
			return nil, err
		}
		events, resp, err := p.client.Issues.ListIssueEvents(ctx, owner, name, number, opts)
		if err := p.after(resp, err); err != nil {
			return nil, fmt.Errorf("events of %s#%d: %w", repository, number, err)
		}
		for _, e := range events {
			if e.GetEvent() == "labeled" && e.GetLabel().GetName() != "" {
				adders[e.GetLabel().GetName()] = e.GetActor().GetLogin()
			}
		}
		if resp.NextPage == 0 {
			return adders, nil
		}
		opts.Page = resp.NextPage
	}
}
