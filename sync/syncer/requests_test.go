package syncer_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
)

// What sync asks GitHub, counted.

// asked counts the requests of a method whose path ends in suffix, whatever
// they were answered: a conditional one answered 304 costs no rate limit,
// but a round trip all the same.
func asked(gh *githubapi.Server, method, suffix string) int {
	n := 0
	for _, r := range gh.Requests() {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) {
			n++
		}
	}
	return n
}

// holdEnv keeps an environment while its teardown would run, as the
// operator's finalizer does; releaseEnv lets it go.
func (h *harness) holdEnv(name string) {
	h.t.Helper()
	patch := []byte(`{"metadata":{"finalizers":["petri.dev/cleanup"]}}`)
	require.NoError(h.t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}}, client.RawPatch(types.MergePatchType, patch)))
}

func (h *harness) releaseEnv(name string) {
	h.t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	require.NoError(h.t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}}, client.RawPatch(types.MergePatchType, patch)))
}

// While the environments of closed pull requests are torn down, no pass
// reads those pull requests again: each was read once, as closed, before
// its environment was deleted. (Every pass read every one of them, so a
// teardown of many cost GitHub requests growing with their square.)
func TestTeardownReadsNoClosedPullRequestAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	var prs []githubapi.PullRequest
	for range 3 {
		prs = append(prs, h.open(githubapi.PullRequest{Labels: []string{"preview"}}))
	}
	for _, pr := range prs {
		h.waitEnv(envName(pr.Number), nil)
		h.holdEnv(envName(pr.Number))
	}
	for _, pr := range prs {
		h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
		h.prEvent(pr.Number, "closed")
	}
	for _, pr := range prs {
		h.waitEnv(envName(pr.Number), func(e *petriv1.EphemeralEnvironment) bool { return e.DeletionTimestamp != nil })
	}
	h.resync()
	h.gh.ResetRequests()
	for range 3 {
		h.resync()
	}
	for _, pr := range prs {
		assert.Zero(t, asked(h.gh, http.MethodGet, fmt.Sprintf("/pulls/%d", pr.Number)), "#%d read again while its environment is being deleted", pr.Number)
	}

	// A pull request reopened meanwhile gets its environment back once the
	// old one is gone; the others stay gone.
	h.gh.UpdatePullRequest(ghRepo, prs[0].Number, func(p *githubapi.PullRequest) { p.State = "open" })
	h.prEvent(prs[0].Number, "reopened")
	h.waitComment(prs[0].Number, "the previous environment of this pull request is still being deleted")
	for _, pr := range prs {
		h.releaseEnv(envName(pr.Number))
	}
	h.waitEnv(envName(prs[0].Number), func(e *petriv1.EphemeralEnvironment) bool { return e.DeletionTimestamp == nil })
	for _, pr := range prs[1:] {
		h.waitGone(envName(pr.Number))
	}
}

// A push is reported once the environment shows its commit: one commit
// status on the new commit, never first a "waiting to deploy" one that the
// next moment's feedback writes over (feedback from the cache's copy from
// before sync's own write).
func TestPushIsReportedOnceTheEnvironmentShowsIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr, _ := h.deployed()
	h.waitComment(pr.Number, pr.HeadSHA[:7])
	for i := range 5 {
		sha := githubapi.SHA(fmt.Sprintf("push %d", i))
		h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
		h.prEvent(pr.Number, "synchronize")
		h.waitComment(pr.Number, "at commit `"+sha[:7]+"`")
		var states []string
		require.Eventually(t, func() bool {
			states = states[:0]
			for _, st := range h.gh.Statuses(ghRepo, sha) {
				states = append(states, st.State+": "+st.Description)
			}
			return len(states) > 0 && strings.HasPrefix(states[len(states)-1], "pending: Deploying")
		}, 10*time.Second, 10*time.Millisecond)
		assert.Len(t, states, 1, "push %d: %q", i, states)
	}
}

// The first status of a commit is compared with the latest GitHub shows
// (a restarted sync repeats none), but that of a commit sync saw become
// the head by a push while it led is posted without reading the commit's
// statuses first: no earlier process can have posted one there.
func TestPushedCommitsStatusIsPostedWithoutARead(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr, _ := h.deployed()
	statusesOf := func(sha string) string { return "/commits/" + sha + "/statuses" }
	require.Eventually(t, func() bool { return len(h.gh.Statuses(ghRepo, pr.HeadSHA)) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, asked(h.gh, http.MethodGet, statusesOf(pr.HeadSHA)), "the head sync found when it started is read")

	sha := githubapi.SHA("pushed")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
	h.prEvent(pr.Number, "synchronize")
	require.Eventually(t, func() bool { return len(h.gh.Statuses(ghRepo, sha)) == 1 }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, envName(pr.Number), ready)
	require.Eventually(t, func() bool { return len(h.gh.Statuses(ghRepo, sha)) == 2 }, 10*time.Second, 10*time.Millisecond)
	assert.Zero(t, asked(h.gh, http.MethodGet, statusesOf(sha)), "a pushed commit's statuses are not read")

	// A new process knows nothing: the head's status is read before it is
	// posted, and not repeated.
	h.restart()
	h.resync()
	setStatus(t, h, envName(pr.Number), func(e *petriv1.EphemeralEnvironment) { e.Status.TargetNamespace = "shop-pr-y-cd34" })
	h.waitComment(pr.Number, "shop-pr-y-cd34")
	assert.Equal(t, 1, asked(h.gh, http.MethodGet, statusesOf(sha)))
	assert.Len(t, h.gh.Statuses(ghRepo, sha), 2, "the status is not posted again")
}

// twoPreviews is a harness with two pull requests that have their
// environments.
func twoPreviews(t *testing.T) (*harness, githubapi.PullRequest, githubapi.PullRequest) {
	t.Helper()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	other := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(pr.Number), nil)
	h.waitEnv(envName(other.Number), nil)
	return h, pr, other
}

// A push's webhook shortly after a listing is answered from that listing
// and the webhook's payload, without a listing of its own; past
// listingReuse (until the next resync is due), or at a resync, the pull
// requests are listed again. A pull
// request closed meanwhile with its webhook lost loses its environment at
// that resync, as without the kept listing.
func TestWebhookPassTakesTheKeptListing(t *testing.T) {
	t.Parallel()
	h, pr, other := twoPreviews(t)
	listings := func() int { return asked(h.gh, http.MethodGet, "/repos/"+ghRepo+"/pulls") }
	push := func(label string) {
		sha := githubapi.SHA(label)
		h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
		h.prEvent(pr.Number, "synchronize")
		h.waitEnv(envName(pr.Number), func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == sha })
	}
	h.resync()
	before := listings()
	push("first push")
	push("second push")
	assert.Equal(t, before, listings(), "pushes answered from the kept listing")

	h.clock.Step(h.s.ListingReuse())
	push("a while later")
	assert.Equal(t, before+1, listings(), "a listing older than ListingReuse is not taken again")

	h.gh.UpdatePullRequest(ghRepo, other.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	push("after a lost close")
	assert.Equal(t, before+1, listings())
	_, err := h.get(envName(other.Number))
	require.NoError(t, err, "kept without evidence of the close")
	// The resync lists: the close is seen.
	h.resync()
	h.waitGone(envName(other.Number))
}

// A resync asked for while a pass is under way is answered by a pass that
// lists after it was asked: the one under way listed before, and reading
// the comments at its end would count it as the resync's.
func TestAResyncDuringAPassIsAnsweredByALaterListing(t *testing.T) {
	t.Parallel()
	h, pr, other := twoPreviews(t)
	h.resync()

	// The next pass lists afresh, does not see other (closed without its
	// webhook) and reads it on its own: that read is held.
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	read := fmt.Sprintf("/repos/%s/pulls/%d", ghRepo, other.Number)
	h.gh.SetFault(&githubapi.Fault{Match: func(r *http.Request) bool {
		if r.Method == http.MethodGet && r.URL.Path == read {
			heldOnce.Do(func() { close(held) })
			<-release
		}
		return false
	}})
	h.gh.UpdatePullRequest(ghRepo, other.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.clock.Step(h.s.ListingReuse())
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = githubapi.SHA("held pass") })
	h.prEvent(pr.Number, "synchronize")
	select {
	case <-held:
	case <-time.After(15 * time.Second):
		t.Fatal("the pass did not read the unlisted pull request")
	}
	asked := len(h.gh.Requests())
	done := func() float64 { return testutil.ToFloat64(h.m.Resyncs.WithLabelValues("done")) }
	resyncs := done()
	h.s.Resync()
	releaseOnce.Do(func() { close(release) })
	require.Eventually(t, func() bool { return done() > resyncs }, 15*time.Second, 5*time.Millisecond)

	listing, comments := -1, -1
	for i, r := range h.gh.Requests()[asked:] {
		switch {
		case r.Method != http.MethodGet:
		case r.Path == "/repos/"+ghRepo+"/pulls" && listing < 0:
			listing = i
		case r.Path == "/repos/"+ghRepo+"/issues/comments" && comments < 0:
			comments = i
		}
	}
	require.GreaterOrEqual(t, comments, 0, "the resync read the repository's comments")
	assert.True(t, listing >= 0 && listing < comments, "the resync listed the pull requests after it was asked for, before it read the comments (listing at %d, comments at %d)", listing, comments)
	h.waitGone(envName(other.Number))
}

// While sync's apply of a pushed commit is under way, feedback says
// nothing: the cache's copy is at the previous commit, the pull request at
// the new one, and a status "waiting to deploy" it would be written over
// the moment the apply shows.
func TestNoFeedbackWhileAnApplyIsUnderWay(t *testing.T) {
	t.Parallel()
	sha := githubapi.SHA("held apply")
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/ephemeralenvironments/") && r.Body != nil {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return nil, err
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(sha)) {
					heldOnce.Do(func() { close(held) })
					<-release
				}
			}
			return next.RoundTrip(r)
		})
	})
	h := newHarness(t, harnessOptions{files: shopFiles(""), restConfig: cfg})
	pr, name := h.deployed()
	h.waitComment(pr.Number, pr.HeadSHA[:7])
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
	h.prEvent(pr.Number, "synchronize")
	select {
	case <-held:
	case <-time.After(15 * time.Second):
		t.Fatal("the push was not applied")
	}
	// A change of the environment asks for its feedback.
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) { e.Status.TargetNamespace = "shop-pr-z-ef56" })
	assert.Never(t, func() bool { return len(h.gh.Statuses(ghRepo, sha)) > 0 }, time.Second, 10*time.Millisecond, "a status while the apply is under way")
	releaseOnce.Do(func() { close(release) })
	h.waitComment(pr.Number, "at commit `"+sha[:7]+"`")
	require.Eventually(t, func() bool { return len(h.gh.Statuses(ghRepo, sha)) > 0 }, 10*time.Second, 10*time.Millisecond)
	sts := h.gh.Statuses(ghRepo, sha)
	require.Len(t, sts, 1)
	assert.Contains(t, sts[0].Description, "Deploying")
}
