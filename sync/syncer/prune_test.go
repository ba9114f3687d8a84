package syncer_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
)

// What sync remembers in memory (webhook snapshots, passed gates, posted
// statuses, per pull request feedback state, the comment of each pull
// request, per repository and application state) is dropped when its pull
// request closes or its repository leaves the config, so that it stays
// bounded by what is open.
func TestInMemoryStateIsPruned(t *testing.T) {
	t.Parallel()
	blog := strings.ReplaceAll(strings.ReplaceAll(appYAML(""), "name: shop\n", "name: blog\n"), "repository: acme/shop", "repository: acme/blog")
	h := newHarness(t, harnessOptions{files: map[string]string{
		"applications/shop.yaml": appYAML("artifactGate:\n  checkRun: build-image\n"),
		"applications/blog.yaml": blog,
	}})
	built := githubapi.CheckRun{Name: "build-image", Status: "completed", Conclusion: "success"}
	build := func(pr githubapi.PullRequest, sha string) {
		h.gh.SetCheckRun(ghRepo, sha, built)
		d, err := h.gh.CheckRunEvent(ghRepo, pr.Number, sha, built)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, h.send(d))
	}
	statusPosted := func(sha string) func() bool {
		return func() bool { return len(h.gh.Statuses(ghRepo, sha)) > 0 }
	}
	commentSays := func(n int, text string) func() bool {
		return func() bool {
			cs := h.gh.Comments(ghRepo, n)
			return len(cs) == 1 && strings.Contains(cs[0].Body, text)
		}
	}
	size := func() syncer.StateSize { return h.s.StateSize() }

	var prs []githubapi.PullRequest
	for range 3 {
		pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
		build(pr, pr.HeadSHA)
		h.prEvent(pr.Number, "opened")
		h.waitEnv(envName(pr.Number), nil)
		require.Eventually(t, statusPosted(pr.HeadSHA), 10*time.Second, 10*time.Millisecond)
		require.Eventually(t, commentSays(pr.Number, envName(pr.Number)), 10*time.Second, 10*time.Millisecond)
		prs = append(prs, pr)
	}
	require.Eventually(t, func() bool {
		n := size()
		return n.PullRequests == 3 && n.Gates == 3 && n.Statuses == 3 && n.Lives == 3
	}, 10*time.Second, 10*time.Millisecond, "%+v", size())

	// A push: the old head's gate and status are forgotten.
	second := githubapi.SHA("second push")
	h.gh.UpdatePullRequest(ghRepo, prs[0].Number, func(p *githubapi.PullRequest) { p.HeadSHA = second })
	build(prs[0], second)
	h.prEvent(prs[0].Number, "synchronize")
	h.waitEnv(envName(prs[0].Number), func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == second })
	require.Eventually(t, statusPosted(second), 10*time.Second, 10*time.Millisecond)
	h.resync()
	require.Eventually(t, func() bool {
		n := size()
		return n.PullRequests == 3 && n.Gates == 3 && n.Statuses == 3
	}, 10*time.Second, 10*time.Millisecond, "%+v", size())

	// Two pull requests close (one merged): once their comments say so,
	// nothing of them is left.
	h.gh.UpdatePullRequest(ghRepo, prs[0].Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.gh.UpdatePullRequest(ghRepo, prs[1].Number, func(p *githubapi.PullRequest) { p.State, p.Merged = "closed", true })
	h.prEvent(prs[0].Number, "closed")
	h.prEvent(prs[1].Number, "closed")
	for _, pr := range prs[:2] {
		h.waitGone(envName(pr.Number))
		require.Eventually(t, commentSays(pr.Number, "Environment deleted"), 10*time.Second, 10*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		n := size()
		return n.PullRequests == 1 && n.Snapshots == 0 && n.Gates == 1 && n.Statuses == 1 && n.Lives == 1 && n.Commands == 0
	}, 10*time.Second, 10*time.Millisecond, "%+v", size())

	// Its comment was forgotten too: reopened, the pull request's comment
	// is found again by listing, and edited, not duplicated.
	h.gh.ResetRequests()
	h.gh.UpdatePullRequest(ghRepo, prs[0].Number, func(p *githubapi.PullRequest) { p.State = "open" })
	h.prEvent(prs[0].Number, "opened")
	h.waitEnv(envName(prs[0].Number), nil)
	require.Eventually(t, commentSays(prs[0].Number, envName(prs[0].Number)+"` at commit"), 10*time.Second, 10*time.Millisecond)
	listed := false
	for _, r := range h.gh.Requests() {
		listed = listed || (r.Method == http.MethodGet && r.Path == fmt.Sprintf("/repos/%s/issues/%d/comments", ghRepo, prs[0].Number))
	}
	assert.True(t, listed, "the reopened pull request's comment was looked up again")

	forgetsRepositoryLeavingConfig(t, h, prs[2])
}

// forgetsRepositoryLeavingConfig takes shop's application out of the
// config: everything of its repository is forgotten, its application's
// metric too, while its environments (open's) are left as they are.
func forgetsRepositoryLeavingConfig(t *testing.T, h *harness, open githubapi.PullRequest) {
	h.pushConfig(map[string]string{"applications/shop.yaml": ""})
	require.Eventually(t, func() bool {
		n := h.s.StateSize()
		return n == syncer.StateSize{Repositories: 1, Applications: 1}
	}, 10*time.Second, 10*time.Millisecond, "%+v", h.s.StateSize())
	assert.Equal(t, 1, testutil.CollectAndCount(h.m.Environments), "only blog's gauge is left")
	_, err := h.get(envName(open.Number))
	require.NoError(t, err)

	// Its webhooks are no longer remembered either. They are handled in
	// order: once blog's pull request has its environment, shop's event
	// before it was handled.
	h.prEvent(open.Number, "synchronize")
	blogPR := h.gh.OpenPullRequest("acme/blog", githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := h.gh.PullRequestEvent("acme/blog", blogPR.Number, "opened")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	h.waitEnv(render.EnvironmentName("blog", "acme/blog", blogPR.Number), nil)
	assert.Equal(t, 1, h.s.StateSize().Repositories, "%+v", h.s.StateSize())
}

// appOf is appYAML's application under another name, for another
// repository.
func appOf(name, repository string) string {
	return strings.ReplaceAll(strings.ReplaceAll(appYAML(""), "name: shop\n", "name: "+name+"\n"), "repository: "+ghRepo, "repository: "+repository)
}

// keptPullRequest opens a pull request of a repository and has alice keep
// it, and waits until its state says so.
func (h *harness) keptPullRequest(repository string) int {
	h.t.Helper()
	h.gh.SetPermission(repository, "alice", "write")
	pr := h.gh.OpenPullRequest(repository, githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := h.gh.PullRequestEvent(repository, pr.Number, "opened")
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusAccepted, h.send(d))
	c := h.gh.AddComment(repository, pr.Number, "alice", "/petri keep")
	d, err = h.gh.IssueCommentEvent(repository, pr.Number, c.ID)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusAccepted, h.send(d))
	require.Eventually(h.t, func() bool {
		st := h.state(repository, pr.Number)
		return st != nil && st.Spec.Kept
	}, 15*time.Second, 10*time.Millisecond, "%s#%d never kept", repository, pr.Number)
	return pr.Number
}

// state is the PullRequestState of a GitHub pull request; nil when there
// is none.
func (h *harness) state(repository string, number int) *petriv1.PullRequestState {
	var list petriv1.PullRequestStateList
	require.NoError(h.t, h.c.List(h.ctx, &list, client.InNamespace(h.ns)))
	for i, st := range list.Items {
		if st.Spec.Repository == repository && st.Spec.Number == int64(number) {
			return &list.Items[i]
		}
	}
	return nil
}

// A config file broken so that it names no application (not YAML, or
// empty) keeps its repository's pull-request states, as it keeps its
// environments: the keep of acme/blog's pull request outlives both, while
// the states of a repository that left the config in the same revision go.
func TestBrokenFileKeepsItsRepositoryStates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: map[string]string{
		"applications/shop.yaml": appYAML(""),
		"applications/blog.yaml": appOf("blog", "acme/blog"),
		"applications/news.yaml": appOf("news", "acme/news"),
	}})
	blog := h.keptPullRequest("acme/blog")
	shop := h.keptPullRequest(ghRepo)
	news := h.keptPullRequest("acme/news")

	for _, step := range []struct {
		broken, leaving string
		number          int
	}{
		{broken: "name: [unclosed", leaving: ghRepo, number: shop},
		{broken: "\n", leaving: "acme/news", number: news},
	} {
		leaving := "applications/" + strings.TrimPrefix(step.leaving, "acme/") + ".yaml"
		h.pushConfig(map[string]string{"applications/blog.yaml": step.broken, leaving: ""})
		// The revision's states are pruned at once: once the leaving
		// repository's is gone, blog's was decided on.
		require.Eventually(t, func() bool { return h.state(step.leaving, step.number) == nil }, 15*time.Second, 10*time.Millisecond,
			"%s left the config; its state stays", step.leaving)
		st := h.state("acme/blog", blog)
		require.NotNil(t, st, "blog.yaml as %q deleted acme/blog's states", step.broken)
		assert.True(t, st.Spec.Kept)
	}
}
