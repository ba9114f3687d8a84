package github_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/provider"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
)

// limitedPair is the GitHub stand-in and a provider on one fake clock.
func limitedPair(t *testing.T) (*githubapi.Server, *ghprovider.Provider, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	srv := githubapi.New(githubapi.Options{Tokens: []string{"tok"}, Clock: clk})
	t.Cleanup(srv.Close)
	p, err := ghprovider.New(ghprovider.Options{BaseURL: srv.URL, Auth: ghprovider.TokenFile(tokenFile(t, "tok")), HTTPClient: &http.Client{Timeout: 5 * time.Second}, Clock: clk, Login: githubapi.APIUser})
	require.NoError(t, err)
	return srv, p, clk
}

func posts(srv *githubapi.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if r.Method == http.MethodPost {
			n++
		}
	}
	return n
}

// The provider never goes beyond GitHub's content-generating requests per
// minute: the write beyond them is refused before it is sent, until the
// window has room, and GitHub never has to refuse one.
func TestWritesStayWithinGitHubsSecondaryLimits(t *testing.T) {
	srv, p, clk := limitedPair(t)
	ctx := context.Background()
	sha := githubapi.SHA("head")
	start := clk.Now()
	for i := range githubapi.ContentRequestsPerMinute {
		p.NewCommit(repo, sha, "petri/shop")
		require.NoError(t, p.SetCommitStatus(ctx, repo, sha, provider.CommitStatus{State: "pending", Context: "petri/shop", Description: fmt.Sprintf("step %d", i)}))
	}
	before := posts(srv)
	err := p.SetCommitStatus(ctx, repo, sha, provider.CommitStatus{State: "success", Context: "petri/shop", Description: "Environment ready"})
	var rle *provider.RateLimitError
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, start.Add(time.Minute+time.Second), rle.Until, "the window has room a minute (and a margin) after its first write")
	assert.Equal(t, before, posts(srv), "the refused write was not sent")

	// Nor are the reads a write needs first made (sync's comment looked
	// for, the statuses of a commit it has not written to): the write
	// could not follow them, and it is sent again later.
	sent := len(srv.Requests())
	err = p.SetCommitStatus(ctx, repo, githubapi.SHA("other"), provider.CommitStatus{State: "pending", Context: "petri/shop", Description: "Deploying"})
	require.True(t, errors.As(err, &rle), "%v", err)
	err = p.UpsertComment(ctx, repo, 7, "<!-- m -->", "<!-- m -->\nReady")
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, sent, len(srv.Requests()), "no read for a write that could not be sent")

	// Other reads go on meanwhile.
	_, err = p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)

	clk.SetTime(rle.Until)
	require.NoError(t, p.SetCommitStatus(ctx, repo, sha, provider.CommitStatus{State: "success", Context: "petri/shop", Description: "Environment ready"}))
	sts := srv.Statuses(repo, sha)
	assert.Equal(t, "success", sts[len(sts)-1].State, "the refused write, sent again, is written")
	assert.Zero(t, srv.SecondaryRateLimited())
	assert.Empty(t, srv.Violations())
}

// When GitHub refuses for a secondary limit all the same (another client
// of the same identity spent it), the whole provider holds until the
// Retry-After has passed: no request at all before it, reads included, and
// the refused write goes through when sent again after it.
func TestSecondaryLimitHoldsTheProviderUntilRetryAfter(t *testing.T) {
	srv, p, clk := limitedPair(t)
	ctx := context.Background()
	srv.OpenPullRequest(repo, githubapi.PullRequest{Number: 7})
	sha := githubapi.SHA("head")
	// Another program with the same token spends the minute's writes.
	for range githubapi.ContentRequestsPerMinute {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"repos/"+repo+"/statuses/"+sha, strings.NewReader(`{"state":"pending","context":"other"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	clk.Step(10 * time.Second)

	err := p.UpsertComment(ctx, repo, 7, "<!-- m -->", "<!-- m -->\nReady")
	var rle *provider.RateLimitError
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, clk.Now().Add(50*time.Second), rle.Until, "GitHub's Retry-After")
	require.Equal(t, 1, srv.SecondaryRateLimited())

	sent := len(srv.Requests())
	clk.Step(49 * time.Second)
	_, err = p.ListOpenPullRequests(ctx, repo)
	require.True(t, errors.As(err, &rle), "a read before the Retry-After is held too: %v", err)
	p.NewCommit(repo, sha, "petri/shop")
	err = p.SetCommitStatus(ctx, repo, sha, provider.CommitStatus{State: "success", Context: "petri/shop"})
	require.True(t, errors.As(err, &rle), "%v", err)
	err = p.UpsertComment(ctx, repo, 7, "<!-- m -->", "<!-- m -->\nReady")
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, sent, len(srv.Requests()), "no request before the Retry-After")

	clk.Step(time.Second)
	require.NoError(t, p.UpsertComment(ctx, repo, 7, "<!-- m -->", "<!-- m -->\nReady"))
	cs := srv.Comments(repo, 7)
	require.Len(t, cs, 1)
	assert.Contains(t, cs[0].Body, "Ready")
	assert.Empty(t, srv.Violations(), "no request of the identity arrived before the Retry-After")
}
