package syncer_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
)

// contentRequests are the content-generating requests the stand-in served,
// by shape.
func contentRequests(gh *githubapi.Server) map[string]int {
	out := map[string]int{}
	for _, r := range gh.Requests() {
		switch r.Method {
		case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
			if !r.SecondaryLimited {
				out[shape(r.Method, r.Path)]++
			}
		}
	}
	return out
}

// shape is a request's method and path with its numbers and commits
// replaced.
func shape(method, path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	for i, s := range seg {
		switch {
		case i == 1 && seg[0] == "repos":
			seg[i] = "{owner}"
		case i == 2 && seg[0] == "repos":
			seg[i] = "{repo}"
		case len(s) == 40:
			seg[i] = "{sha}"
		case strings.Trim(s, "0123456789") == "":
			seg[i] = "{n}"
		}
	}
	return method + " /" + strings.Join(seg, "/")
}

// A pull request's life (open → Ready → push → Ready → close) costs at
// most seven content-generating requests at GitHub: the pending and the
// success status of each commit, the comment written once its environment
// is Ready, edited once for the second commit's Ready and once when it is
// torn down. No step on the way (deploying, tearing down) is written.
func TestPullRequestLifeCostsSevenWrites(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles(""), commentPatience: syncer.DefaultCommentPatience})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	require.Eventually(t, func() bool { return latestStatus(h.gh, pr.HeadSHA).State == "pending" }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latestStatus(h.gh, pr.HeadSHA).State == "success" }, 10*time.Second, 10*time.Millisecond)
	h.waitComment(pr.Number, ":white_check_mark: **Ready**")

	sha := githubapi.SHA("pushed")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
	h.prEvent(pr.Number, "synchronize")
	h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == sha })
	require.Eventually(t, func() bool { return latestStatus(h.gh, sha).State == "pending" }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latestStatus(h.gh, sha).State == "success" }, 10*time.Second, 10*time.Millisecond)
	body := h.waitComment(pr.Number, "at commit `"+sha[:7]+"`")
	assert.Contains(t, body, ":white_check_mark: **Ready**")

	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(pr.Number, "closed")
	h.waitGone(name)
	h.waitComment(pr.Number, "Environment deleted")

	writes := contentRequests(h.gh)
	total := 0
	for _, n := range writes {
		total += n
	}
	t.Logf("content-generating requests of the life: %d %v", total, writes)
	assert.LessOrEqual(t, total, 7, "%v", writes)
	assert.Equal(t, 4, writes["POST /repos/{owner}/{repo}/statuses/{sha}"], "a pending and a success status per commit")
	assert.Equal(t, 1, writes["POST /repos/{owner}/{repo}/issues/{n}/comments"], "one comment")
	assert.LessOrEqual(t, writes["PATCH /repos/{owner}/{repo}/issues/comments/{n}"], 2, "edited for the second Ready and the teardown only")
	assert.Len(t, h.gh.Comments(ghRepo, pr.Number), 1)
}

// A hundred pull requests opened at once, then a config change that
// redeploys every environment, with GitHub's secondary rate limits on
// (80 writes a minute, 500 an hour): every pull request ends with its
// final status and comment right, none lost, and not one request reaches
// GitHub before a Retry-After it was given has passed. The stand-in keeps
// sync's clock, which the test moves on fast, so that the hour's limit is
// met and waited out in seconds.
func TestHundredPullRequestsWithinGitHubsLimits(t *testing.T) {
	h := newHarness(t, harnessOptions{files: shopFiles(""), commentPatience: syncer.DefaultCommentPatience, ghClock: true})
	const n = 100
	var prs []githubapi.PullRequest
	for range n {
		prs = append(prs, h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}}))
	}
	// Time runs 200 times as fast as the wall clock from here on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				h.clock.Step(2 * time.Second)
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	h.resync()
	require.Eventually(t, func() bool { return h.envCount() == n }, 60*time.Second, 50*time.Millisecond)
	generations := map[int]int64{}
	for _, pr := range prs {
		e := h.waitEnv(envName(pr.Number), nil)
		generations[pr.Number] = e.Generation
		setStatus(t, h, envName(pr.Number), ready)
	}
	allRight := func(want string) func() bool {
		return func() bool {
			for _, pr := range prs {
				st := latestStatus(h.gh, pr.HeadSHA)
				if st.State != "success" || st.Description != fmt.Sprintf("Environment ready at https://pr-%d.shop.test", pr.Number) {
					return false
				}
				cs := h.gh.Comments(ghRepo, pr.Number)
				if len(cs) != 1 || !strings.Contains(cs[0].Body, ":white_check_mark: **Ready**") || !strings.Contains(cs[0].Body, want) {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, allRight("| web | web 1.4.2 |"), 120*time.Second, 100*time.Millisecond, "every pull request's status and comment say Ready")
	opened := h.gh.ContentRequests()

	// The config change: web's chart moves to 1.5.0, every environment is
	// deployed again.
	h.pushConfig(map[string]string{"applications/shop.yaml": strings.Replace(appYAML(""), `version: "~1.4"`, `version: "1.5.0"`, 1)})
	for _, pr := range prs {
		e := h.waitEnv(envName(pr.Number), func(e *petriv1.EphemeralEnvironment) bool { return e.Generation > generations[pr.Number] })
		require.Equal(t, "1.5.0", e.Spec.Components[1].Chart.Version)
		setStatus(t, h, envName(pr.Number), ready)
	}
	require.Eventually(t, allRight("| web | web 1.5.0 |"), 180*time.Second, 100*time.Millisecond, "every pull request's status and comment say Ready with the new chart")

	t.Logf("content-generating requests: %d for the opening, %d in all; refused for a secondary limit: %d", opened, h.gh.ContentRequests(), h.gh.SecondaryRateLimited())
	assert.Empty(t, h.gh.Violations(), "requests before a Retry-After had passed")
	for _, pr := range prs {
		assert.Len(t, h.gh.Comments(ghRepo, pr.Number), 1, "#%d has one comment", pr.Number)
	}
}

// The same budget holds on GitLab's write paths: a merge request's life
// (open → Ready → push → Ready → close) costs at most seven
// content-generating requests at the GitLab stand-in.
func TestMergeRequestLifeOnGitLabCostsSevenWrites(t *testing.T) {
	t.Parallel()
	const token, bot = "glpat-sync", "petri-bot"
	gl := gitlabapi.New(gitlabapi.Options{Tokens: map[string]string{token: bot}})
	t.Cleanup(gl.Close)
	gl.AddProject(ghRepo)
	gl.AddMember(ghRepo, bot, gitlabapi.Developer, "", false)
	files := map[string]string{"applications/shop.yaml": strings.Replace(appYAML(""), "repository: ", "forge: gitlab\nrepository: ", 1)}
	h := newHarness(t, harnessOptions{files: files, commentPatience: syncer.DefaultCommentPatience, gitlab: gl, gitlabToken: token})
	first := strings.Repeat("a", 40)
	iid := gl.OpenMergeRequest(ghRepo, gitlabapi.MergeRequest{Title: "Cart", SourceBranch: "cart", SHA: first, Labels: []string{"preview"}, Author: "alice"})
	name := render.EnvironmentName("shop", "gitlab:"+ghRepo, iid)
	latest := func(sha string) string {
		sts := gl.CommitStatuses(ghRepo, sha)
		if len(sts) == 0 {
			return ""
		}
		return sts[len(sts)-1].Status
	}
	note := func() string {
		for _, n := range gl.Notes(ghRepo, iid) {
			if strings.Contains(n.Body, render.CommentMarker) {
				return n.Body
			}
		}
		return ""
	}
	h.resync()
	h.waitEnv(name, nil)
	require.Eventually(t, func() bool { return latest(first) == "pending" }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latest(first) == "success" }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(note(), "**Ready**") }, 10*time.Second, 10*time.Millisecond)

	second := strings.Repeat("b", 40)
	gl.Push(ghRepo, "cart", second, "alice")
	h.resync()
	h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == second })
	require.Eventually(t, func() bool { return latest(second) == "pending" }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latest(second) == "success" }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(note(), "at commit `"+second[:7]+"`") }, 10*time.Second, 10*time.Millisecond)

	gl.UpdateMergeRequest(ghRepo, iid, func(mr *gitlabapi.MergeRequest) { mr.State = "closed" })
	h.resync()
	h.waitGone(name)
	require.Eventually(t, func() bool { return strings.Contains(note(), "Environment deleted") }, 10*time.Second, 10*time.Millisecond)

	writes := map[string]int{}
	total := 0
	for _, r := range gl.Requests() {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writes[shape(r.Method, r.Path)]++
			total++
		}
	}
	t.Logf("content-generating requests of the life on GitLab: %d %v", total, writes)
	assert.LessOrEqual(t, total, 7, "%v", writes)
}

// countingProxy stands in front of a forge and counts the
// content-generating requests that go through it, by shape (their path
// without the prefix of the forge's API).
type countingProxy struct {
	URL string

	mu     sync.Mutex
	writes map[string]int
}

func newCountingProxy(t *testing.T, target, apiPrefix string) *countingProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &countingProxy{writes: map[string]int{}}
	next := httputil.NewSingleHostReverseProxy(u)
	// A request sync gives up on as it stops is no fault of the forge's.
	next.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			p.mu.Lock()
			p.writes[shape(r.Method, strings.TrimPrefix(r.URL.Path, apiPrefix))]++
			p.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// counted are the content-generating requests so far, by shape, and their
// number.
func (p *countingProxy) counted() (map[string]int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out, total := map[string]int{}, 0
	for k, n := range p.writes {
		out[k] = n
		total += n
	}
	return out, total
}

// The same budget holds on Gitea's write paths, against a real Gitea: a
// pull request's life (open → Ready → push → Ready → close) costs at most
// seven content-generating requests, counted by a proxy in front of Gitea
// that sync's Gitea provider talks to.
func TestPullRequestLifeOnGiteaCostsSevenWrites(t *testing.T) {
	t.Parallel()
	srv, err := gitea.Start(gitea.Options{})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	require.NoError(t, srv.CreateOrg("acme"))
	require.NoError(t, srv.CreateRepository(ghRepo))
	_, err = srv.Push(ghRepo, gitea.Commit{Branch: "main", Files: map[string]string{"README.md": "shop\n"}, Message: "Initial commit"})
	require.NoError(t, err)
	bot, err := srv.CreateUser("petri-bot")
	require.NoError(t, err)
	require.NoError(t, srv.AddCollaborator(ghRepo, bot.Name, "admin"))
	token, err := srv.CreateToken(bot, "petri-sync", "write:repository", "write:issue", "read:user")
	require.NoError(t, err)
	proxy := newCountingProxy(t, srv.URL, "/api/v1")

	files := map[string]string{"applications/shop.yaml": strings.Replace(appYAML(""), "repository: ", "forge: gitea\nrepository: ", 1)}
	h := newHarness(t, harnessOptions{files: files, commentPatience: syncer.DefaultCommentPatience, giteaURL: proxy.URL, giteaToken: token, githubTimeout: 30 * time.Second})
	first, err := srv.Push(ghRepo, gitea.Commit{Branch: "cart", Files: map[string]string{"cart.txt": "1"}, Message: "Add the cart"})
	require.NoError(t, err)
	number, err := srv.OpenPullRequest(ghRepo, gitea.PullRequest{Head: "cart", Title: "Cart"})
	require.NoError(t, err)
	require.NoError(t, srv.AddLabels(ghRepo, number, "preview"))
	name := render.EnvironmentName("shop", "gitea:"+ghRepo, number)
	latest := func(sha string) string {
		var combined struct {
			Statuses []struct {
				Context string `json:"context"`
				Status  string `json:"status"`
			} `json:"statuses"`
		}
		require.NoError(t, srv.Call(nil, http.MethodGet, "/repos/"+ghRepo+"/commits/"+sha+"/status", nil, &combined))
		for _, s := range combined.Statuses {
			if s.Context == "petri/shop" {
				return s.Status
			}
		}
		return ""
	}
	comments := func() []string {
		var list []struct {
			Body string `json:"body"`
			User struct {
				Login string `json:"login"`
			} `json:"user"`
		}
		require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/issues/%d/comments", ghRepo, number), nil, &list))
		var out []string
		for _, c := range list {
			if c.User.Login == bot.Name && strings.Contains(c.Body, render.CommentMarker) {
				out = append(out, c.Body)
			}
		}
		return out
	}
	comment := func() string {
		if cs := comments(); len(cs) > 0 {
			return cs[0]
		}
		return ""
	}
	h.resync()
	h.waitEnv(name, nil)
	require.Eventually(t, func() bool { return latest(first) == "pending" }, 20*time.Second, 20*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latest(first) == "success" }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(comment(), "**Ready**") }, 20*time.Second, 20*time.Millisecond)

	second, err := srv.Push(ghRepo, gitea.Commit{Branch: "cart", Files: map[string]string{"cart.txt": "2"}, Message: "Price the cart"})
	require.NoError(t, err)
	h.resync()
	h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == second })
	require.Eventually(t, func() bool { return latest(second) == "pending" }, 20*time.Second, 20*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latest(second) == "success" }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(comment(), "at commit `"+second[:7]+"`") }, 20*time.Second, 20*time.Millisecond)
	assert.Contains(t, comment(), "**Ready**")

	require.NoError(t, srv.ClosePullRequest(ghRepo, number))
	h.resync()
	h.waitGone(name)
	require.Eventually(t, func() bool { return strings.Contains(comment(), "Environment deleted") }, 20*time.Second, 20*time.Millisecond)

	writes, total := proxy.counted()
	t.Logf("content-generating requests of the life on Gitea: %d %v", total, writes)
	assert.LessOrEqual(t, total, 7, "%v", writes)
	assert.Equal(t, 4, writes["POST /repos/{owner}/{repo}/statuses/{sha}"], "a pending and a success status per commit")
	assert.Equal(t, 1, writes["POST /repos/{owner}/{repo}/issues/{n}/comments"], "one comment")
	assert.LessOrEqual(t, writes["PATCH /repos/{owner}/{repo}/issues/comments/{n}"], 2, "edited for the second Ready and the teardown only")
	assert.Len(t, comments(), 1)
}
