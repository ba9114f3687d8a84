package gitlab_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/local/gitlabapi"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
)

// failing makes GitLab fail on demand: every call answers 500, except
// listings of merge requests, which answer an empty page (a truncated
// listing) at the stand-in's time.
type failing struct {
	next http.RoundTripper
	srv  *gitlabapi.Server
	now  func() time.Time
	on   atomic.Bool
}

func (f *failing) RoundTrip(r *http.Request) (*http.Response, error) {
	if !f.on.Load() {
		return f.next.RoundTrip(r)
	}
	resp := &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{}, Request: r,
		Body: io.NopCloser(strings.NewReader(`{"message":"500 Internal Server Error"}`))}
	if strings.HasSuffix(r.URL.Path, "/merge_requests") {
		resp.StatusCode = http.StatusOK
		resp.Body = io.NopCloser(strings.NewReader("[]"))
	}
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Date", f.now().UTC().Format(http.TimeFormat))
	return resp, nil
}

// TestTruncatedListingDuringOutage: a merge request closed while GitLab
// fails, its hook lost, and a listing during the outage that answers
// nothing (every other call failing) must not hide the close once GitLab
// recovers: the listing after failed calls is a full one, so the closed
// merge request is missing from it (and read on its own by sync), and the
// open one is still there.
func TestTruncatedListingDuringOutage(t *testing.T) {
	ctx := context.Background()
	srv := gitlabapi.New(gitlabapi.Options{Tokens: map[string]string{token: bot}})
	t.Cleanup(srv.Close)
	now := start
	srv.SetNow(start)
	srv.AddProject(repo)
	tr := &failing{next: http.DefaultTransport, srv: srv, now: func() time.Time { return now }}
	clk := clocktesting.NewFakePassiveClock(start)
	p, err := glprovider.New(glprovider.Options{BaseURL: srv.URL, Token: token, Clock: clk,
		HTTPClient: &http.Client{Transport: tr, Timeout: 10 * time.Second}})
	require.NoError(t, err)
	advance := func(d time.Duration) {
		now = now.Add(d)
		srv.SetNow(now)
		clk.SetTime(now)
	}

	closing := srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{SHA: "a"})
	staying := srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{SHA: "b"})
	prs, err := p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	require.Len(t, prs, 2)

	advance(time.Minute)
	srv.UpdateMergeRequest(repo, closing, func(mr *gitlabapi.MergeRequest) { mr.State = "closed" })
	tr.on.Store(true)
	for range 3 {
		// One resync round of the outage: a failing call, the truncated
		// listing, another failing call.
		advance(time.Minute)
		_, err := p.GetPullRequest(ctx, repo, staying)
		require.Error(t, err)
		_, err = p.ListOpenPullRequests(ctx, repo)
		require.NoError(t, err, "the truncated listing answers 200")
		_, err = p.GetPullRequest(ctx, repo, closing)
		require.Error(t, err)
	}
	tr.on.Store(false)
	advance(time.Minute)
	srv.ResetRequests()
	prs, err = p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	got := byNumber(prs)
	assert.NotContains(t, got, closing, "the merge request closed during the outage is not taken for open")
	assert.Contains(t, got, staying)
	assert.Equal(t, "opened", srv.Requests()[0].Query.Get("state"), "the first listing after the outage is a full one")
}
