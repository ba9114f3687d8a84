// The pull-request source: open merge requests listed whole once and then
// by what changed (updated_after), one read on its own, and the gate of a
// head commit from its commit statuses, pipelines and jobs
// (provider.PullRequestSource).

package gitlab

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/petri-dev/petri/sync/provider"
)

// pageSize is GitLab's largest per_page.
const pageSize = 100

// listMargin is how far before the previous listing's start the next one
// asks for changes: GitLab stamps updated_at on the server that wrote the
// change, and a change committed while a listing ran may carry an earlier
// time than the listing's Date.
const listMargin = time.Minute

// mergeRequests is the pull-request source: the open merge requests of
// each repository as last listed, and the gates of their head commits.
type mergeRequests struct {
	*api
	fullList time.Duration

	mu sync.Mutex
	// open is each repository's open merge requests as last listed.
	open map[string]*openList
}

// openList is a repository's open merge requests as last listed.
type openList struct {
	prs map[int]openMR
	// since is the server's time (its Date header) when the last listing
	// began: the next one asks for what changed after it.
	since time.Time
	// full is when, by the provider's clock, the last full listing was.
	full time.Time
	// failures is the provider's count of failed calls when the listing
	// began.
	failures int64
}

// openMR is one open merge request and the ref its head commit is reached
// by in the target project (a deployment names it).
type openMR struct {
	pr  provider.PullRequest
	ref string
}

// ListOpenPullRequests returns every open merge request of a project. The
// first listing (and one every FullListEvery) reads them all, 100 a page;
// the others ask only for merge requests updated since the last listing
// (state=all&updated_after=…), in any state, and apply them: opened ones
// are added or replaced, closed and merged ones dropped. An unchanged
// project costs one request.
//
// After a call to GitLab failed the next listing is a full one: a listing
// GitLab answered during an outage may have left out what changed (a
// truncated page), and asking only for what changed after it would never
// see those changes again; a full listing leaves out the merge requests
// closed meanwhile, which sync then reads on their own.
func (m *mergeRequests) ListOpenPullRequests(ctx context.Context, repository string) ([]provider.PullRequest, error) {
	pid, err := project(repository)
	if err != nil {
		return nil, err
	}
	key := repoKey(repository)
	now := m.clock.Now()
	failures := m.failures.Load()
	m.mu.Lock()
	var prev *openList
	if have := m.open[key]; have != nil && now.Sub(have.full) < m.fullList && have.failures == failures {
		prev = &openList{prs: maps.Clone(have.prs), since: have.since, full: have.full, failures: failures}
	}
	m.mu.Unlock()

	next := prev
	opts := &gl.ListProjectMergeRequestsOptions{ListOptions: gl.ListOptions{PerPage: pageSize},
		OrderBy: gl.Ptr("updated_at"), Sort: gl.Ptr("desc")}
	if prev == nil {
		next = &openList{prs: map[int]openMR{}, full: now, failures: failures}
		opts.State = gl.Ptr("opened")
	} else {
		opts.State = gl.Ptr("all")
		opts.UpdatedAfter = gl.Ptr(prev.since.Add(-listMargin).UTC())
	}
	started := false
	err = m.listMergeRequests(ctx, pid, opts, func(resp *gl.Response, mrs []*gl.BasicMergeRequest) {
		if !started {
			started = true
			next.since = serverTime(resp, now)
		}
		for _, mr := range mrs {
			if pr := convert(repository, mr); pr.Open() {
				next.prs[pr.Number] = openMR{pr: pr, ref: headRef(mr)}
			} else {
				delete(next.prs, pr.Number)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list merge requests of %s: %w", repository, err)
	}
	m.mu.Lock()
	if have := m.open[key]; have == nil || !next.since.Before(have.since) || prev == nil {
		m.open[key] = next
	}
	m.mu.Unlock()
	out := make([]provider.PullRequest, 0, len(next.prs))
	for _, mr := range next.prs {
		pr := mr.pr
		pr.Labels = slices.Clone(pr.Labels)
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b provider.PullRequest) int { return cmp.Compare(b.Number, a.Number) })
	return out, nil
}

// listMergeRequests lists merge requests page by page, giving each page to
// page.
func (a *api) listMergeRequests(ctx context.Context, pid string, opts *gl.ListProjectMergeRequestsOptions, page func(*gl.Response, []*gl.BasicMergeRequest)) error {
	for {
		if err := a.before(); err != nil {
			return err
		}
		mrs, resp, err := a.client.MergeRequests.ListProjectMergeRequests(pid, opts, gl.WithContext(ctx))
		if err := a.after(resp, err); err != nil {
			return err
		}
		page(resp, mrs)
		if resp.NextPage == 0 || len(mrs) == 0 {
			return nil
		}
		opts.Page = resp.NextPage
	}
}

// serverTime is the time of an answer by its Date header, else now.
func serverTime(resp *gl.Response, now time.Time) time.Time {
	if resp != nil && resp.Response != nil {
		if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			return t
		}
	}
	return now
}

// headRef is the ref a merge request's head commit is reached by in its
// target project: the source branch, or for a merge request from a fork
// GitLab's refs/merge-requests/<iid>/head (the fork's branch is not in the
// target project).
func headRef(mr *gl.BasicMergeRequest) string {
	if mr.SourceProjectID != 0 && mr.TargetProjectID != 0 && mr.SourceProjectID != mr.TargetProjectID {
		return fmt.Sprintf("refs/merge-requests/%d/head", mr.IID)
	}
	return mr.SourceBranch
}

// refOf is the ref of a head commit of an open merge request as last
// listed; the commit itself when none is known.
func (m *mergeRequests) refOf(repository, sha string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.open[repoKey(repository)]; l != nil {
		for _, mr := range l.prs {
			if mr.pr.HeadSHA == sha && mr.ref != "" {
				return mr.ref
			}
		}
	}
	return sha
}

// GetPullRequest reads one merge request by its IID.
func (m *mergeRequests) GetPullRequest(ctx context.Context, repository string, number int) (provider.PullRequest, error) {
	pid, err := project(repository)
	if err != nil {
		return provider.PullRequest{}, err
	}
	if err := m.before(); err != nil {
		return provider.PullRequest{}, err
	}
	mr, resp, err := m.client.MergeRequests.GetMergeRequest(pid, int64(number), nil, gl.WithContext(ctx))
	if err := m.after(resp, err); err != nil {
		return provider.PullRequest{}, fmt.Errorf("get merge request %s!%d: %w", repository, number, err)
	}
	return convert(repository, &mr.BasicMergeRequest), nil
}

// convert reads a merge request as a pull request. GitLab's states are
// opened, closed, merged and locked (a merge under way, still open).
func convert(repository string, mr *gl.BasicMergeRequest) provider.PullRequest {
	out := provider.PullRequest{
		Repository: repository,
		Number:     int(mr.IID),
		State:      state(mr.State),
		Merged:     mr.State == "merged" || mr.MergedAt != nil,
		Draft:      mr.Draft,
		Title:      mr.Title,
		HeadBranch: mr.SourceBranch,
		HeadSHA:    mr.SHA,
		BaseBranch: mr.TargetBranch,
		Labels:     slices.Clone([]string(mr.Labels)),
		URL:        mr.WebURL,
		// A merge request from a fork has its source in another project.
		Fork: mr.SourceProjectID != mr.TargetProjectID,
	}
	if mr.Author != nil {
		out.Author = mr.Author.Username
	}
	if mr.CreatedAt != nil {
		out.CreatedAt = *mr.CreatedAt
	}
	if mr.UpdatedAt != nil {
		out.UpdatedAt = *mr.UpdatedAt
	}
	return out
}

// state maps GitLab's merge request states onto provider.PullRequest's.
func state(s string) string {
	switch s {
	case "opened", "locked":
		return "open"
	}
	return "closed"
}

// GateState reads a gate on a commit. A gate's StatusContext names a
// commit status (posted by an outside CI, or a GitLab CI job: GitLab lists
// each job as a commit status of its commit), its latest of that name;
// failing that, a pipeline of the commit of that name (workflow:name), its
// newest. A gate's CheckRun names a job: the job of that name in the
// newest pipeline of the commit that has one (retried jobs replaced by
// their latest attempt). success passes; failed and canceled fail; every
// other state (created, pending, running, manual, scheduled, skipped, ...)
// or none yet waits.
//
// Only the target project's pipelines count: a pipeline a fork ran in the
// fork is the fork owner's to forge, and is not read.
func (m *mergeRequests) GateState(ctx context.Context, repository, sha string, gate provider.Gate) (provider.GateState, string, error) {
	pid, err := project(repository)
	if err != nil {
		return "", "", err
	}
	if gate.CheckRun != "" {
		return m.jobGate(ctx, pid, sha, gate.CheckRun)
	}
	if err := m.before(); err != nil {
		return "", "", err
	}
	sts, resp, err := m.client.Commits.GetCommitStatuses(pid, sha, &gl.GetCommitStatusesOptions{
		Name: gl.Ptr(gate.StatusContext), ListOptions: gl.ListOptions{PerPage: pageSize}}, gl.WithContext(ctx))
	if err := m.after(resp, err); err != nil {
		return "", "", fmt.Errorf("statuses of %s@%s: %w", repository, short(sha), err)
	}
	var latest *gl.CommitStatus
	for _, st := range sts {
		if st.Name == gate.StatusContext && (latest == nil || st.ID > latest.ID) {
			latest = st
		}
	}
	if latest != nil {
		return gateState("status", gate.StatusContext, latest.Status, sha)
	}
	pipelines, err := m.pipelines(ctx, pid, sha, gate.StatusContext)
	if err != nil {
		return "", "", fmt.Errorf("pipelines of %s@%s: %w", repository, short(sha), err)
	}
	if len(pipelines) > 0 {
		return gateState("pipeline", gate.StatusContext, pipelines[0].Status, sha)
	}
	return provider.GatePending, fmt.Sprintf("waiting for status %s on %s", gate.StatusContext, short(sha)), nil
}

// jobGate reads the job named name in the newest pipeline of sha that has
// one.
func (m *mergeRequests) jobGate(ctx context.Context, pid, sha, name string) (provider.GateState, string, error) {
	pipelines, err := m.pipelines(ctx, pid, sha, "")
	if err != nil {
		return "", "", fmt.Errorf("pipelines of %s@%s: %w", pid, short(sha), err)
	}
	for _, pl := range pipelines {
		opts := &gl.ListJobsOptions{ListOptions: gl.ListOptions{PerPage: pageSize}}
		for {
			if err := m.before(); err != nil {
				return "", "", err
			}
			jobs, resp, err := m.client.Jobs.ListPipelineJobs(pid, pl.ID, opts, gl.WithContext(ctx))
			if err := m.after(resp, err); err != nil {
				return "", "", fmt.Errorf("jobs of pipeline %d of %s: %w", pl.ID, pid, err)
			}
			for _, j := range jobs {
				if j.Name == name {
					return gateState("job", name, j.Status, sha)
				}
			}
			if resp.NextPage == 0 || len(jobs) == 0 {
				break
			}
			opts.Page = resp.NextPage
		}
	}
	return provider.GatePending, fmt.Sprintf("waiting for job %s on %s", name, short(sha)), nil
}

// pipelines lists a commit's pipelines, newest first (one page: a commit
// has few), of that name when name is not empty.
func (m *mergeRequests) pipelines(ctx context.Context, pid, sha, name string) ([]*gl.PipelineInfo, error) {
	if err := m.before(); err != nil {
		return nil, err
	}
	opts := &gl.ListProjectPipelinesOptions{SHA: gl.Ptr(sha), OrderBy: gl.Ptr("id"), Sort: gl.Ptr("desc"),
		ListOptions: gl.ListOptions{PerPage: 20}}
	if name != "" {
		opts.Name = gl.Ptr(name)
	}
	pls, resp, err := m.client.Pipelines.ListProjectPipelines(pid, opts, gl.WithContext(ctx))
	if err := m.after(resp, err); err != nil {
		return nil, err
	}
	slices.SortStableFunc(pls, func(a, b *gl.PipelineInfo) int { return cmp.Compare(b.ID, a.ID) })
	return pls, nil
}

// forgetRepository forgets a repository's open merge requests as last
// listed: the next listing is a full one.
func (m *mergeRequests) forgetRepository(repository string) {
	m.mu.Lock()
	delete(m.open, repoKey(repository))
	m.mu.Unlock()
}

// gateState maps a commit status's, pipeline's or job's status onto a gate
// state.
func gateState(what, name, status, sha string) (provider.GateState, string, error) {
	switch status {
	case "success":
		return provider.GatePassed, fmt.Sprintf("%s %s succeeded on %s", what, name, short(sha)), nil
	case "failed", "canceled":
		return provider.GateFailed, fmt.Sprintf("%s %s %s on %s", what, name, status, short(sha)), nil
	}
	return provider.GatePending, fmt.Sprintf("%s %s is %s on %s", what, name, status, short(sha)), nil
}
