package gitlab_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/sync/provider"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
)

// repo sits in nested groups, as many GitLab projects do.
const (
	repo  = "acme/platform/shop"
	token = "glpat-sync"
	bot   = "petri-bot"
)

// start is the stand-in's clock at the beginning of each test.
var start = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type fixture struct {
	srv   *gitlabapi.Server
	p     *glprovider.Provider
	clock *clocktesting.FakePassiveClock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := gitlabapi.New(gitlabapi.Options{Tokens: map[string]string{token: bot, "glpat-other": "mallory"}})
	t.Cleanup(srv.Close)
	srv.SetNow(start)
	srv.AddProject(repo)
	srv.AddMember(repo, bot, gitlabapi.Developer, "", false)
	clk := clocktesting.NewFakePassiveClock(start)
	p, err := glprovider.New(glprovider.Options{BaseURL: srv.URL, Token: token, Clock: clk,
		HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	require.NoError(t, err)
	return &fixture{srv: srv, p: p, clock: clk}
}

// count is how many requests the stand-in answered since the last reset.
func (f *fixture) count() int { return len(f.srv.Requests()) }

func byNumber(prs []provider.PullRequest) map[int]provider.PullRequest {
	out := map[int]provider.PullRequest{}
	for _, pr := range prs {
		out[pr.Number] = pr
	}
	return out
}

func TestPullRequests(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.srv.AddProject("outsider/shop")
	ready := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{Title: "Add the cart", SourceBranch: "cart", SHA: "aaaa111",
		Labels: []string{"preview", "team-a"}, Author: "alice"})
	draft := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{Title: "Draft: checkout", Draft: true, SHA: "bbbb222"})
	fork := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{Title: "Fix from a fork", SourceBranch: "patch",
		SourceProject: "outsider/shop", SHA: "cccc333", Author: "outsider"})
	closed := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{State: "closed"})
	merged := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{State: "merged"})

	prs, err := f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	got := byNumber(prs)
	require.Len(t, got, 3)
	assert.NotContains(t, got, closed)
	assert.NotContains(t, got, merged)
	assert.Equal(t, []int{fork, draft, ready}, []int{prs[0].Number, prs[1].Number, prs[2].Number}, "newest first")

	r := got[ready]
	assert.Equal(t, repo, r.Repository)
	assert.True(t, r.Open())
	assert.False(t, r.Draft)
	assert.Equal(t, "Add the cart", r.Title)
	assert.Equal(t, "alice", r.Author)
	assert.Equal(t, "cart", r.HeadBranch)
	assert.Equal(t, "aaaa111", r.HeadSHA)
	assert.Equal(t, "main", r.BaseBranch)
	assert.Equal(t, []string{"preview", "team-a"}, r.Labels)
	assert.Equal(t, f.srv.URL+"/"+repo+"/-/merge_requests/1", r.URL)
	assert.True(t, r.CreatedAt.Equal(start), "%v", r.CreatedAt)
	assert.True(t, got[draft].Draft)
	assert.Equal(t, "patch", got[fork].HeadBranch, "the fork's branch")
	assert.Equal(t, "cccc333", got[fork].HeadSHA, "the fork's head commit")

	// The nested path is one escaped segment, as GitLab wants it.
	for _, req := range f.srv.Requests() {
		assert.True(t, strings.HasPrefix(req.Path, "/api/v4/projects/acme%2Fplatform%2Fshop/"), req.Path)
	}

	m, err := f.p.GetPullRequest(ctx, repo, merged)
	require.NoError(t, err)
	assert.False(t, m.Open())
	assert.True(t, m.Merged)
	c, err := f.p.GetPullRequest(ctx, repo, closed)
	require.NoError(t, err)
	assert.Equal(t, "closed", c.State)
	assert.False(t, c.Merged)
	_, err = f.p.GetPullRequest(ctx, repo, 99)
	assert.ErrorIs(t, err, provider.ErrNotFound)
	_, err = f.p.ListOpenPullRequests(ctx, "acme/missing")
	assert.ErrorIs(t, err, provider.ErrNotFound)
	_, err = f.p.ListOpenPullRequests(ctx, "acme//shop")
	assert.Error(t, err)
}

// A resync of an unchanged project lists only what changed since the last
// listing: one request, whatever the number of open merge requests; a
// change, a close and a new merge request show through it, and a merge
// request deleted outright goes at the next full listing.
func TestUnchangedResyncCostsOneRequest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for range 150 {
		f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{SHA: "s"})
	}
	f.srv.Advance(5 * time.Minute)
	prs, err := f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	require.Len(t, prs, 150)
	assert.Equal(t, 2, f.count(), "the first listing reads two pages of 100")

	f.srv.Advance(5 * time.Minute)
	f.clock.SetTime(start.Add(10 * time.Minute))
	f.srv.ResetRequests()
	again, err := f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	assert.Equal(t, prs, again)
	since := start.Add(5 * time.Minute)
	comments, err := f.p.ListRepositoryComments(ctx, repo, since)
	require.NoError(t, err)
	assert.Empty(t, comments)
	reqs := f.srv.Requests()
	require.Len(t, reqs, 2, "an unchanged resync: one listing of merge requests, one of notes")
	assert.Equal(t, "all", reqs[0].Query.Get("state"))
	assert.Equal(t, start.Add(4*time.Minute).Format(time.RFC3339), reqs[0].Query.Get("updated_after"),
		"the previous listing's time by GitLab's Date, less a minute")
	t.Logf("requests per unchanged resync of a project with 150 open merge requests: %d", len(reqs))

	f.srv.UpdateMergeRequest(repo, 3, func(mr *gitlabapi.MergeRequest) { mr.Title = "changed" })
	f.srv.UpdateMergeRequest(repo, 4, func(mr *gitlabapi.MergeRequest) { mr.State = "merged" })
	added := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{Title: "new"})
	f.srv.Advance(5 * time.Minute)
	f.srv.ResetRequests()
	again, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	assert.Equal(t, 1, f.count())
	got := byNumber(again)
	assert.Len(t, got, 150)
	assert.Equal(t, "changed", got[3].Title)
	assert.NotContains(t, got, 4)
	assert.Equal(t, "new", got[added].Title)

	f.srv.DeleteMergeRequest(repo, 5)
	again, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	assert.Contains(t, byNumber(again), 5, "a deletion changes nothing updated_after lists")
	f.clock.SetTime(start.Add(time.Hour + 6*time.Minute))
	f.srv.ResetRequests()
	again, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	assert.NotContains(t, byNumber(again), 5, "the hourly full listing drops it")
	assert.Equal(t, "opened", f.srv.Requests()[0].Query.Get("state"))
}

func TestGate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const sha = "1234567890abcdef"
	check := func(gate provider.Gate, want provider.GateState, reason string) {
		t.Helper()
		st, why, err := f.p.GateState(ctx, repo, sha, gate)
		require.NoError(t, err)
		assert.Equal(t, want, st, why)
		assert.Equal(t, reason, why)
	}
	ci := provider.Gate{StatusContext: "ci/build"}
	check(ci, provider.GatePending, "waiting for status ci/build on 1234567")
	f.srv.AddCommitStatus(repo, gitlabapi.CommitStatus{SHA: sha, Name: "ci/build", Status: "running"})
	check(ci, provider.GatePending, "status ci/build is running on 1234567")
	f.srv.AddCommitStatus(repo, gitlabapi.CommitStatus{SHA: sha, Name: "ci/build", Status: "failed"})
	check(ci, provider.GateFailed, "status ci/build failed on 1234567")
	f.srv.AddCommitStatus(repo, gitlabapi.CommitStatus{SHA: sha, Name: "ci/build", Status: "success"})
	check(ci, provider.GatePassed, "status ci/build succeeded on 1234567")

	// A status context no status has names a pipeline (workflow:name).
	named := provider.Gate{StatusContext: "Preview pipeline"}
	f.srv.AddPipeline(repo, gitlabapi.Pipeline{SHA: sha, Ref: "cart", Name: "Preview pipeline", Status: "canceled"})
	check(named, provider.GateFailed, "pipeline Preview pipeline canceled on 1234567")
	f.srv.AddPipeline(repo, gitlabapi.Pipeline{SHA: sha, Ref: "cart", Name: "Preview pipeline", Status: "success"})
	check(named, provider.GatePassed, "pipeline Preview pipeline succeeded on 1234567")

	// A check run names a job: that of the newest pipeline that has it.
	job := provider.Gate{CheckRun: "test"}
	check(job, provider.GatePending, "waiting for job test on 1234567")
	f.srv.AddPipeline(repo, gitlabapi.Pipeline{SHA: sha, Ref: "cart", Status: "failed",
		Jobs: []gitlabapi.Job{{Name: "build", Status: "success"}, {Name: "test", Status: "failed"}}})
	check(job, provider.GateFailed, "job test failed on 1234567")
	f.srv.AddPipeline(repo, gitlabapi.Pipeline{SHA: sha, Ref: "refs/merge-requests/1/head", Status: "running",
		Jobs: []gitlabapi.Job{{Name: "test", Status: "manual"}}})
	check(job, provider.GatePending, "job test is manual on 1234567")
	f.srv.AddPipeline(repo, gitlabapi.Pipeline{SHA: sha, Ref: "cart", Status: "success",
		Jobs: []gitlabapi.Job{{Name: "lint", Status: "success"}}})
	check(job, provider.GatePending, "job test is manual on 1234567")
	f.srv.AddPipeline(repo, gitlabapi.Pipeline{SHA: sha, Ref: "cart", Status: "success",
		Jobs: []gitlabapi.Job{{Name: "test", Status: "success"}}})
	check(job, provider.GatePassed, "job test succeeded on 1234567")
}

func TestCommitStatus(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const sha = "abcdef0123"
	set := func(st provider.CommitStatus) {
		t.Helper()
		require.NoError(t, f.p.SetCommitStatus(ctx, repo, sha, st))
	}
	pending := provider.CommitStatus{State: "pending", Context: "petri/shop", Description: "Deploying", TargetURL: "https://petri.example/shop-1"}
	set(pending)
	set(pending)
	sts := f.srv.CommitStatuses(repo, sha)
	require.Len(t, sts, 1, "the same status is not posted again")
	assert.Equal(t, "pending", sts[0].Status)
	assert.Equal(t, "Deploying", sts[0].Description)
	assert.Equal(t, "https://petri.example/shop-1", sts[0].TargetURL)

	// GitLab cannot move a pending status into pending: the new
	// description is no error and the status stays.
	set(provider.CommitStatus{State: "pending", Context: "petri/shop", Description: "Waiting for the build"})
	assert.Len(t, f.srv.CommitStatuses(repo, sha), 1)

	set(provider.CommitStatus{State: "success", Context: "petri/shop", Description: "Ready", TargetURL: "https://shop-1.example"})
	set(provider.CommitStatus{State: "error", Context: "petri/cart", Description: "Deploy failed"})
	set(provider.CommitStatus{State: "failure", Context: "petri/shop", Description: "Deploy failed"})
	sts = f.srv.CommitStatuses(repo, sha)
	require.Len(t, sts, 3)
	assert.Equal(t, "success", sts[0].Status)
	assert.Equal(t, "Ready", sts[0].Description)
	assert.Equal(t, []string{"petri/cart", "failed"}, []string{sts[1].Name, sts[1].Status}, "GitLab has no error state")
	assert.Equal(t, []string{"petri/shop", "failed"}, []string{sts[2].Name, sts[2].Status}, "a status per application")
	f.srv.ResetRequests()
	set(provider.CommitStatus{State: "failure", Context: "petri/shop", Description: "Deploy failed"})
	assert.Equal(t, 1, f.count(), "a status already there costs one read")
}

// Only a note written by the token's user is sync's: a note carrying the
// marker written by anyone else is left alone, and sync writes its own.
func TestUpsertCommentOwnNoteOnly(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const marker = "<!-- petri -->"
	n := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{})
	forged := f.srv.AddNote(repo, n, "mallory", marker+" deploy my branch to production")
	f.srv.AddSystemNote(repo, n, marker+" added 1 commit")

	require.NoError(t, f.p.UpsertComment(ctx, repo, n, marker, marker+" one"))
	notes := f.srv.Notes(repo, n)
	require.Len(t, notes, 3)
	assert.Equal(t, marker+" deploy my branch to production", notes[0].Body, "another user's note is left alone")
	assert.Equal(t, forged, notes[0].ID)
	own := notes[2]
	assert.Equal(t, bot, own.Author)
	assert.Equal(t, marker+" one", own.Body)

	f.srv.ResetRequests()
	require.NoError(t, f.p.UpsertComment(ctx, repo, n, marker, marker+" one"))
	assert.Equal(t, 0, f.count(), "an unchanged note costs nothing")
	require.NoError(t, f.p.UpsertComment(ctx, repo, n, marker, marker+" two"))
	notes = f.srv.Notes(repo, n)
	require.Len(t, notes, 3, "edited in place")
	assert.Equal(t, marker+" two", notes[2].Body)

	// A new provider (a restarted sync) finds its own note, not mallory's.
	p2, err := glprovider.New(glprovider.Options{BaseURL: f.srv.URL, Token: token})
	require.NoError(t, err)
	require.NoError(t, p2.UpsertComment(ctx, repo, n, marker, marker+" three"))
	notes = f.srv.Notes(repo, n)
	require.Len(t, notes, 3)
	assert.Equal(t, marker+" deploy my branch to production", notes[0].Body)
	assert.Equal(t, marker+" three", notes[2].Body)

	// Deleted, it is written again.
	f.srv.DeleteNote(repo, own.ID)
	require.NoError(t, p2.UpsertComment(ctx, repo, n, marker, marker+" four"))
	notes = f.srv.Notes(repo, n)
	require.Len(t, notes, 3)
	assert.Equal(t, marker+" four", notes[2].Body)
	assert.NotEqual(t, own.ID, notes[2].ID)
}

func TestSelfAndTokenFile(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("glpat-other\n"), 0o600))
	p, err := glprovider.New(glprovider.Options{BaseURL: f.srv.URL + "/api/v4", TokenFile: path})
	require.NoError(t, err)
	self, err := p.Self(ctx)
	require.NoError(t, err)
	assert.Equal(t, "mallory", self)

	// A rotated token is used without a restart.
	require.NoError(t, os.WriteFile(path, []byte("glpat-revoked"), 0o600))
	later := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) // after any mtime the file had
	require.NoError(t, os.Chtimes(path, later, later))
	_, err = p.ListOpenPullRequests(ctx, repo)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401")
	assert.NotContains(t, err.Error(), "glpat-revoked", "the token is never in an error")

	_, err = glprovider.New(glprovider.Options{BaseURL: f.srv.URL})
	assert.Error(t, err, "no token")
	_, err = glprovider.New(glprovider.Options{BaseURL: "gitlab.example.com", Token: token})
	assert.Error(t, err, "not an http(s) URL")
}

func TestRateLimit(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var rle *provider.RateLimitError

	// A 429 stops every call until Retry-After.
	f.srv.RefuseNext(1, 30*time.Second)
	_, err := f.p.ListOpenPullRequests(ctx, repo)
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, start.Add(30*time.Second), rle.Until)
	assert.Equal(t, 1, f.count(), "the client does not retry")
	_, err = f.p.GetPullRequest(ctx, repo, 1)
	require.True(t, errors.As(err, &rle))
	assert.Equal(t, 1, f.count(), "no call before the announced time")
	f.clock.SetTime(start.Add(30 * time.Second))
	_, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)

	// A 429 without Retry-After waits for RateLimit-Reset.
	reset := start.Add(2 * time.Minute)
	f.srv.SetRateLimit(2000, 0, reset)
	f.srv.RefuseNext(1, 0)
	_, err = f.p.GetPullRequest(ctx, repo, 1)
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, reset, rle.Until)
	f.clock.SetTime(reset)

	// An answer saying no request is left stops the next calls until the
	// reset, though it succeeded itself.
	reset = start.Add(5 * time.Minute)
	f.srv.SetRateLimit(2000, 0, reset)
	f.srv.ResetRequests()
	_, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	_, err = f.p.ListComments(ctx, repo, 1)
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, reset, rle.Until)
	assert.Equal(t, 1, f.count())
	f.srv.SetRateLimit(2000, 1999, reset.Add(time.Minute))
	f.clock.SetTime(reset)
	_, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	_, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err, "requests left: no stop")
}

// A token file replaced by another user's token (a new project access
// token is a new bot user): the provider asks who it is again and writes a
// note of its own, instead of editing the old user's note for ever (403).
func TestNewTokenUserWritesItsOwnNote(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const marker = "<!-- petri -->"
	f.srv.AddMember(repo, "mallory", gitlabapi.Developer, "", false)
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(token), 0o600))
	p, err := glprovider.New(glprovider.Options{BaseURL: f.srv.URL, TokenFile: path})
	require.NoError(t, err)
	n := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{})
	require.NoError(t, p.UpsertComment(ctx, repo, n, marker, marker+" one"))
	self, err := p.Self(ctx)
	require.NoError(t, err)
	require.Equal(t, bot, self)

	require.NoError(t, os.WriteFile(path, []byte("glpat-other"), 0o600))
	later := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) // after any mtime the file had
	require.NoError(t, os.Chtimes(path, later, later))
	self, err = p.Self(ctx)
	require.NoError(t, err)
	assert.Equal(t, "mallory", self, "the new token's user")
	require.NoError(t, p.UpsertComment(ctx, repo, n, marker, marker+" two"))
	notes := f.srv.Notes(repo, n)
	require.Len(t, notes, 2)
	assert.Equal(t, bot, notes[0].Author)
	assert.Equal(t, marker+" one", notes[0].Body, "the old user's note is not edited")
	assert.Equal(t, "mallory", notes[1].Author)
	assert.Equal(t, marker+" two", notes[1].Body)
}
