package github_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/provider"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
)

const repo = "acme/shop"

func tokenFile(t *testing.T, tok string) string {
	p := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(p, []byte(tok+"\n"), 0o600))
	return p
}

func newProvider(t *testing.T, srv *githubapi.Server, auth ghprovider.Auth) *ghprovider.Provider {
	t.Helper()
	p, err := ghprovider.New(ghprovider.Options{BaseURL: srv.URL, Auth: auth, HTTPClient: &http.Client{Timeout: time.Second}})
	require.NoError(t, err)
	return p
}

func TestListIsPaginatedAndConditional(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{Tokens: []string{"tok"}})
	defer srv.Close()
	for range 150 {
		srv.OpenPullRequest(repo, githubapi.PullRequest{Labels: []string{"preview"}})
	}
	p := newProvider(t, srv, ghprovider.TokenFile(tokenFile(t, "tok")))
	ctx := context.Background()
	prs, err := p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	require.Len(t, prs, 150)
	assert.Equal(t, []string{"preview"}, prs[0].Labels)
	assert.Len(t, srv.Requests(), 2, "two pages of 100")

	srv.ResetRequests()
	remaining := srv.RateLimitRemaining()
	again, err := p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	assert.Equal(t, prs, again)
	for _, r := range srv.Requests() {
		assert.True(t, r.Conditional)
		assert.Equal(t, http.StatusNotModified, r.Status)
	}
	assert.Equal(t, remaining, srv.RateLimitRemaining())
	rem, _ := p.RateLimit()
	assert.Equal(t, remaining, rem)

	// A change shows through the cache.
	srv.UpdatePullRequest(repo, 150, func(pr *githubapi.PullRequest) { pr.Title = "changed" })
	again, err = p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	assert.Equal(t, "changed", again[0].Title)
}

func TestBadTokenIsAnError(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{Tokens: []string{"tok"}})
	defer srv.Close()
	p := newProvider(t, srv, ghprovider.TokenFile(tokenFile(t, "wrong")))
	_, err := p.ListOpenPullRequests(context.Background(), repo)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "wrong", "the token never appears in errors")
}

func TestRateLimitsAreHonoured(t *testing.T) {
	t.Parallel()
	for _, f := range []*githubapi.Fault{
		{RateLimited: true, RetryAfter: 30 * time.Second},
		{SecondaryRateLimited: true, RetryAfter: 30 * time.Second},
		{Status: http.StatusTooManyRequests},
	} {
		srv := githubapi.New(githubapi.Options{})
		srv.SetFault(f)
		p := newProvider(t, srv, nil)
		_, err := p.ListOpenPullRequests(context.Background(), repo)
		var rle *provider.RateLimitError
		require.True(t, errors.As(err, &rle), "%+v: %v", f, err)
		assert.True(t, rle.Until.After(clock.RealClock{}.Now().Add(10*time.Second)), "wait until the announced reset")
		srv.SetFault(nil)
		srv.ResetRequests()
		_, err = p.GetPullRequest(context.Background(), repo, 1)
		require.True(t, errors.As(err, &rle))
		assert.Empty(t, srv.Requests(), "no request before the reset")
		srv.Close()
	}
}

func TestGateState(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	p := newProvider(t, srv, nil)
	ctx := context.Background()
	sha := githubapi.SHA("x")
	check := provider.Gate{CheckRun: "build"}
	st, reason, err := p.GateState(ctx, repo, sha, check)
	require.NoError(t, err)
	assert.Equal(t, provider.GatePending, st)
	assert.Equal(t, "waiting for check run build on "+sha[:7], reason)
	srv.SetCheckRun(repo, sha, githubapi.CheckRun{Name: "build", Status: "completed", Conclusion: "failure"})
	st, _, _ = p.GateState(ctx, repo, sha, check)
	assert.Equal(t, provider.GateFailed, st)
	srv.SetCheckRun(repo, sha, githubapi.CheckRun{Name: "build", Status: "completed", Conclusion: "success"})
	st, _, _ = p.GateState(ctx, repo, sha, check)
	assert.Equal(t, provider.GatePassed, st)

	status := provider.Gate{StatusContext: "ci/image"}
	st, _, _ = p.GateState(ctx, repo, sha, status)
	assert.Equal(t, provider.GatePending, st)
	srv.SetStatus(repo, sha, "ci/image", "error")
	st, _, _ = p.GateState(ctx, repo, sha, status)
	assert.Equal(t, provider.GateFailed, st)
	srv.SetStatus(repo, sha, "ci/image", "success")
	st, _, _ = p.GateState(ctx, repo, sha, status)
	assert.Equal(t, provider.GatePassed, st)
}

func TestUpsertCommentCreatesOnceThenEdits(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	srv.OpenPullRequest(repo, githubapi.PullRequest{})
	srv.AddComment(repo, 1, "bob", "first!")
	ctx := context.Background()
	p := newProvider(t, srv, nil)
	require.NoError(t, p.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\none"))
	require.NoError(t, p.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\ntwo"))
	srv.ResetRequests()
	require.NoError(t, p.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\ntwo"))
	assert.Empty(t, srv.Requests(), "an unchanged body costs nothing")

	// A restarted sync finds its comment instead of adding one.
	fresh := newProvider(t, srv, nil)
	require.NoError(t, fresh.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\nthree"))
	cs := srv.Comments(repo, 1)
	require.Len(t, cs, 2)
	assert.Equal(t, "first!", cs[0].Body)
	assert.Equal(t, "<!-- m -->\nthree", cs[1].Body)
	assert.Equal(t, 2, cs[1].Edits)
}

// TestOnlyItsOwnCommentIsEdited: a comment carrying the marker that someone
// else wrote (an author copying sync's comment, before sync comments or
// after) is never edited; sync writes and keeps its own.
func TestOnlyItsOwnCommentIsEdited(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	srv.OpenPullRequest(repo, githubapi.PullRequest{})
	forged := "<!-- m -->\nforged by the author"
	srv.AddComment(repo, 1, "mallory", forged)
	ctx := context.Background()
	p := newProvider(t, srv, nil)
	login, err := p.Login(ctx)
	require.NoError(t, err)
	assert.Equal(t, "petri[bot]", login, "the token's user, as GET /user says")
	require.NoError(t, p.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\none"))
	srv.AddComment(repo, 1, "mallory", forged)
	fresh := newProvider(t, srv, nil)
	require.NoError(t, fresh.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\ntwo"))
	cs := srv.Comments(repo, 1)
	require.Len(t, cs, 3)
	assert.Equal(t, forged, cs[0].Body, "the author's comment before sync's is untouched")
	assert.Equal(t, "<!-- m -->\ntwo", cs[1].Body, "sync's own comment is the one edited")
	assert.Equal(t, "petri[bot]", cs[1].Author)
	assert.Equal(t, forged, cs[2].Body, "the author's comment after sync's is untouched")
	assert.Zero(t, cs[0].Edits+cs[2].Edits)
}

// A forgotten pull request's comment is found again by listing; one
// still remembered is edited without a listing.
func TestForgottenCommentIsFoundAgain(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	srv.OpenPullRequest(repo, githubapi.PullRequest{})
	srv.OpenPullRequest(repo, githubapi.PullRequest{})
	ctx := context.Background()
	p := newProvider(t, srv, nil)
	require.NoError(t, p.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\none"))
	require.NoError(t, p.UpsertComment(ctx, repo, 2, "<!-- m -->", "<!-- m -->\none"))
	listed := func() int {
		n := 0
		for _, r := range srv.Requests() {
			if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/comments") {
				n++
			}
		}
		return n
	}
	srv.ResetRequests()
	require.NoError(t, p.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\ntwo"))
	assert.Equal(t, 0, listed(), "a remembered comment is edited directly")

	p.ForgetPullRequest(strings.ToUpper(repo), 1)
	require.NoError(t, p.UpsertComment(ctx, repo, 1, "<!-- m -->", "<!-- m -->\nthree"))
	assert.Equal(t, 1, listed(), "a forgotten one is listed again")
	require.NoError(t, p.UpsertComment(ctx, repo, 2, "<!-- m -->", "<!-- m -->\ntwo"))
	assert.Equal(t, 1, listed(), "forgetting one pull request leaves the others")

	p.ForgetRepository(repo)
	require.NoError(t, p.UpsertComment(ctx, repo, 2, "<!-- m -->", "<!-- m -->\nthree"))
	assert.Equal(t, 2, listed(), "forgetting the repository forgets all of its pull requests")
	for _, n := range []int{1, 2} {
		cs := srv.Comments(repo, n)
		require.Len(t, cs, 1, "still one comment on #%d", n)
		assert.Equal(t, "<!-- m -->\nthree", cs[0].Body)
	}
}

func TestSetCommitStatusCutsDescription(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	p := newProvider(t, srv, nil)
	require.NoError(t, p.SetCommitStatus(context.Background(), repo, "abc", provider.CommitStatus{State: "failure", Context: "petri/shop", Description: strings.Repeat("x", 300), TargetURL: "https://x"}))
	sts := srv.Statuses(repo, "abc")
	require.Len(t, sts, 1)
	assert.Equal(t, 140, len([]rune(sts[0].Description)))
	assert.Equal(t, "https://x", sts[0].TargetURL)

	// The same status again, from a provider that remembers nothing (a
	// restart), is not posted twice; a different one is.
	again := newProvider(t, srv, nil)
	st := provider.CommitStatus{State: "failure", Context: "petri/shop", Description: strings.Repeat("x", 300), TargetURL: "https://x"}
	require.NoError(t, again.SetCommitStatus(context.Background(), repo, "abc", st))
	require.Len(t, srv.Statuses(repo, "abc"), 1)
	st.State = "success"
	require.NoError(t, again.SetCommitStatus(context.Background(), repo, "abc", st))
	require.Len(t, srv.Statuses(repo, "abc"), 2)
}

// A commit the caller saw become a head (NewCommit) has its first status
// posted without a read of its statuses; told so of a commit whose status
// it posted, the provider still posts no status twice.
func TestNewCommitsStatusIsPostedWithoutARead(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	p := newProvider(t, srv, nil)
	reads := func() int {
		n := 0
		for _, r := range srv.Requests() {
			if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/statuses") {
				n++
			}
		}
		return n
	}
	st := provider.CommitStatus{State: "pending", Context: "petri/shop", Description: "Deploying"}
	p.NewCommit(repo, "def", st.Context)
	require.NoError(t, p.SetCommitStatus(context.Background(), repo, "def", st))
	require.Len(t, srv.Statuses(repo, "def"), 1)
	assert.Zero(t, reads())
	p.NewCommit(repo, "def", st.Context)
	require.NoError(t, p.SetCommitStatus(context.Background(), repo, "def", st))
	assert.Len(t, srv.Statuses(repo, "def"), 1, "posted once")
	require.NoError(t, p.SetCommitStatus(context.Background(), repo, "abc", st))
	assert.Equal(t, 1, reads(), "a commit not told of is read first")
}

func TestGitHubAppOnEnterpriseBaseURL(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	// Tokens that expire within a minute are refreshed before every use.
	srv := githubapi.New(githubapi.Options{PathPrefix: "/api/v3", AppID: 42, AppKey: &key.PublicKey, InstallationTokenTTL: 30 * time.Second})
	defer srv.Close()
	srv.OpenPullRequest(repo, githubapi.PullRequest{})
	require.True(t, strings.HasSuffix(srv.URL, "/api/v3/"))

	p := newProvider(t, srv, ghprovider.App(42, 7, keyFile))
	for range 3 {
		prs, err := p.ListOpenPullRequests(context.Background(), repo)
		require.NoError(t, err)
		require.Len(t, prs, 1)
	}
	assert.Equal(t, 3, srv.InstallationTokensIssued(), "a token about to expire is replaced before use")
	login, err := p.Login(context.Background())
	require.NoError(t, err)
	assert.Equal(t, githubapi.AppSlug+"[bot]", login, "an App's comments are its bot's, as GET /app says")

	long := githubapi.New(githubapi.Options{AppID: 42, AppKey: &key.PublicKey})
	defer long.Close()
	long.OpenPullRequest(repo, githubapi.PullRequest{})
	p = newProvider(t, long, ghprovider.App(42, 7, keyFile))
	for range 3 {
		_, err := p.ListOpenPullRequests(context.Background(), repo)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, long.InstallationTokensIssued(), "a valid token is reused")

	wrong := newProvider(t, long, ghprovider.App(43, 7, keyFile))
	_, err = wrong.ListOpenPullRequests(context.Background(), repo)
	assert.Error(t, err, "a JWT of another app is refused")
}

// sync's workers, feedback and gates call GitHub at once; their connections
// stay open for the next calls instead of a new TCP and TLS handshake each.
func TestConnectionsAreKeptForConcurrentCalls(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{Tokens: []string{"tok"}})
	defer srv.Close()
	srv.OpenPullRequest(repo, githubapi.PullRequest{Labels: []string{"preview"}})
	p := newProvider(t, srv, ghprovider.TokenFile(tokenFile(t, "tok")))
	const callers, rounds = 12, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				_, err := p.ListOpenPullRequests(context.Background(), repo)
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// One per caller, kept for its next calls; Go's transport may dial one
	// more when a request races a connection coming back to the pool.
	// Without idle connections kept, 240 calls opened over a hundred.
	assert.LessOrEqual(t, srv.Connections(), 2*callers, "connections are kept for the callers' next calls")
}

// Once a provider has posted a commit's status for a context, its next
// status there is posted without reading the commit's statuses first: the
// read is made only for a commit and context it has not posted yet.
func TestSetCommitStatusReadsOnlyWhatItDidNotPost(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	p := newProvider(t, srv, nil)
	ctx := context.Background()
	reads := func() int {
		n := 0
		for _, r := range srv.Requests() {
			if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/statuses") {
				n++
			}
		}
		return n
	}
	st := provider.CommitStatus{State: "pending", Context: "petri/shop", Description: "Deploying"}
	require.NoError(t, p.SetCommitStatus(ctx, repo, "abc", st))
	assert.Equal(t, 1, reads(), "the first status of a commit reads what GitHub shows")
	st.State, st.Description = "success", "Ready"
	require.NoError(t, p.SetCommitStatus(ctx, repo, "abc", st))
	require.NoError(t, p.SetCommitStatus(ctx, repo, "abc", st))
	assert.Equal(t, 1, reads(), "the next ones do not")
	require.Len(t, srv.Statuses(repo, "abc"), 2, "each change posted once")

	require.NoError(t, p.SetCommitStatus(ctx, repo, "def", st))
	assert.Equal(t, 2, reads(), "another commit is read first")
	p.ForgetRepository(repo)
	st.State = "failure"
	require.NoError(t, p.SetCommitStatus(ctx, repo, "abc", st))
	assert.Equal(t, 3, reads(), "a forgotten repository is read again")
	require.Len(t, srv.Statuses(repo, "abc"), 3)
}
