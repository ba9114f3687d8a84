package syncer_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
)

// lifecycleFiles is the shop application with another ttl and extra
// settings.
func lifecycleFiles(ttl, extra string) map[string]string {
	return map[string]string{"applications/shop.yaml": strings.Replace(appYAML(extra), "ttl: 72h", "ttl: "+ttl, 1)}
}

// readyNow plays the operator: the environment is Ready for its current
// generation, from now.
func readyNow(t *testing.T, h *harness, name string) {
	t.Helper()
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		meta.RemoveStatusCondition(&e.Status.Conditions, petriv1.ConditionReady)
		ready(e)
	})
}

// comment is sync's comment on a pull request ("" when there is none):
// the one with the marker that sync's identity wrote.
func (h *harness) comment(number int) string {
	for _, c := range h.gh.Comments(ghRepo, number) {
		if strings.Contains(c.Body, render.CommentMarker) && c.Author == syncLogin {
			return c.Body
		}
	}
	return ""
}

func (h *harness) waitComment(number int, text string) string {
	h.t.Helper()
	var body string
	require.Eventually(h.t, func() bool {
		body = h.comment(number)
		return strings.Contains(body, text)
	}, 15*time.Second, 10*time.Millisecond, "comment on #%d never said %q; last:\n%s", number, text, body)
	return body
}

// readyAt waits until sync's state on a pull request has the first Ready of
// an application's head commit, and returns it: its ttl counts from there.
func (h *harness) readyAt(number int, app string) time.Time {
	h.t.Helper()
	var at time.Time
	require.Eventually(h.t, func() bool {
		st, ok := render.ParseState(h.comment(number))
		if a := st.Apps[app]; ok && a != nil {
			at = a.ReadyAt
		}
		return !at.IsZero()
	}, 15*time.Second, 10*time.Millisecond, "sync never saw #%d Ready", number)
	return at
}

func (h *harness) latestStatus(sha string) githubapi.Status {
	sts := h.gh.Statuses(ghRepo, sha)
	if len(sts) == 0 {
		return githubapi.Status{}
	}
	return sts[len(sts)-1]
}

// An environment expires ttl after its head commit was first Ready, with a
// warning before; sync records it in its comment before it deletes it, and
// neither a resync nor a new sync process (with nothing in memory) writes
// it again. A push brings it back.
func TestExpiredEnvironmentStaysGoneAcrossRestarts(t *testing.T) {
	t.Parallel()
	const ttl = 6 * time.Second
	h := newHarness(t, harnessOptions{files: lifecycleFiles("6s", "")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	e := h.waitEnv(name, nil)
	assert.Nil(t, e.Spec.TTL, "sync's own expiry, not the operator's spec.ttl")
	h.waitComment(pr.Number, "- Expires: 6s after its commit is first ready")

	readyAt := h.clock.Now()
	readyNow(t, h, name)
	h.waitComment(pr.Number, "(ttl 6s from the first deploy of its commit)")
	// The warning comes before the expiry (a quarter of the ttl before).
	seen := h.readyAt(pr.Number, "shop")
	h.clock.skipTo(seen.Add(ttl - render.WarnBefore(ttl) + 200*time.Millisecond))
	h.waitComment(pr.Number, ":warning: **This environment expires at")
	_, err := h.get(name)
	require.NoError(t, err, "warned, not yet expired")

	h.clock.skipTo(seen.Add(ttl + 100*time.Millisecond))
	h.waitGone(name)
	assert.GreaterOrEqual(t, h.clock.Since(readyAt), ttl-time.Second, "expired after its ttl, counted from Ready")
	body := h.waitComment(pr.Number, ":hourglass_flowing_sand: **Expired** at")
	assert.Contains(t, body, "To bring it back, push a commit or comment `/petri wake`")
	state, ok := render.ParseState(body)
	require.True(t, ok)
	assert.Equal(t, pr.HeadSHA, state.Apps["shop"].ExpiredSHA, "the expiry is in the comment's state")
	require.Eventually(t, func() bool {
		return strings.Contains(h.latestStatus(pr.HeadSHA).Description, "Environment expired (ttl 6s); push or comment /petri wake to bring it back")
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "success", h.latestStatus(pr.HeadSHA).State, "an expiry does not fail the commit")
	assert.Equal(t, 1.0, metricValue(t, h, "petri_sync_lifecycle_total", "expired"))

	// Neither a resync nor a webhook brings it back.
	h.resync()
	h.prEvent(pr.Number, "labeled")
	h.resync()
	_, err = h.get(name)
	require.Error(t, err, "an expired environment was written again")

	// Nor a new sync process that remembers nothing (as after a restart or
	// a change of leader).
	h.restart()
	h.resync()
	h.prEvent(pr.Number, "assigned")
	h.resync()
	_, err = h.get(name)
	require.Error(t, err, "a restarted sync wrote the expired environment again")
	assert.Len(t, h.gh.Comments(ghRepo, pr.Number), 1, "still one comment")
	assert.Contains(t, h.comment(pr.Number), "**Expired** at")

	// A push brings it back, with a new clock.
	second := githubapi.SHA("after expiry")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = second })
	h.prEvent(pr.Number, "synchronize")
	e = h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == second })
	body = h.waitComment(pr.Number, "- Expires: 6s after its commit is first ready")
	assert.NotContains(t, body, "**Expired**")
	state, _ = render.ParseState(body)
	assert.Empty(t, state.Apps["shop"].ExpiredSHA)
}

// metricValue reads one series of a counter of the harness's sync.
func metricValue(t *testing.T, h *harness, name, label string) float64 {
	t.Helper()
	families, err := h.m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The keep label suspends expiry; taking it off lets the environment
// expire. /petri wake brings an expired environment back.
func TestKeepLabelSuspendsExpiryAndWakeBringsItBack(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	h := newHarness(t, harnessOptions{files: lifecycleFiles("2s", "")})
	h.gh.SetPermission(ghRepo, "alice", "write")
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview", "petri/keep"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	readyNow(t, h, name)
	h.waitComment(pr.Number, "- Expiry: suspended by the label `petri/keep`")
	h.clock.skipTo(h.readyAt(pr.Number, "shop").Add(ttl + 2*time.Second))
	h.resync()
	assert.Never(t, func() bool {
		_, err := h.get(name)
		return err != nil
	}, 500*time.Millisecond, 50*time.Millisecond, "a kept environment expired")

	// Without the label its time is up at once.
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.Labels = []string{"preview"} })
	h.prEvent(pr.Number, "unlabeled")
	h.waitGone(name)
	h.waitComment(pr.Number, "**Expired** at")

	// /petri wake from someone with write access brings it back.
	c := h.command(pr.Number, "alice", "/petri wake")
	h.waitReaction(c, "+1")
	h.waitEnv(name, nil)
	body := h.waitComment(pr.Number, "`/petri wake` from @alice: shop comes back (it had expired)")
	assert.NotContains(t, body, "**Expired**")
}

// After sleepAfter without a push or a command, sync asks the environment
// to sleep; the operator's Sleeping shows in the comment, the status and
// the read API; a wake through the read API (or kubectl annotate) counts as
// activity, so sync asks for sleep again only sleepAfter later.
func TestSleepAfterIdleAndWake(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	h := newHarness(t, harnessOptions{files: shopFiles("sleepAfter: 2s\n")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	created := h.waitEnv(name, nil)
	h.waitComment(pr.Number, "- Sleeps after 2s without a push or a command")
	readyNow(t, h, name)
	h.clock.skipTo(created.CreationTimestamp.Add(idle + time.Second))

	asked := func(after time.Time) time.Time {
		var at time.Time
		require.Eventually(t, func() bool {
			e, err := h.get(name)
			if err != nil {
				return false
			}
			at, err = time.Parse(time.RFC3339, e.Annotations[render.AnnotationSleepRequested])
			return err == nil && !at.Before(after.Truncate(time.Second))
		}, 15*time.Second, 10*time.Millisecond, "no sleep request after %s", after)
		return at
	}
	first := asked(created.CreationTimestamp.Time)
	assert.GreaterOrEqual(t, first.Sub(created.CreationTimestamp.Time), idle-time.Second, "asked only after the idle time")
	require.Eventually(t, func() bool { return metricValue(t, h, "petri_sync_lifecycle_total", "sleep_requested") == 1 }, 5*time.Second, 10*time.Millisecond)

	// The operator (played by the test) puts it to sleep.
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.Phase = petriv1.EnvironmentSleeping
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Sleeping", ObservedGeneration: e.Generation})
	})
	h.waitComment(pr.Number, ":zzz: **Sleeping**")
	require.Eventually(t, func() bool {
		return strings.Contains(h.latestStatus(pr.HeadSHA).Description, "Environment asleep")
	}, 10*time.Second, 10*time.Millisecond)
	var view syncer.Environment
	require.Equal(t, http.StatusOK, getJSON(t, h.url+api.EnvironmentsPath+"/"+name, &view))
	assert.Equal(t, "Sleeping", view.Phase)

	// Wake through the read API.
	resp, err := http.Post(h.url+api.EnvironmentsPath+"/"+name+"/wake", "", nil)
	require.NoError(t, err)
	var woke struct {
		WakeRequested time.Time `json:"wakeRequested"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&woke))
	_ = resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	e, err := h.get(name)
	require.NoError(t, err)
	assert.Equal(t, woke.WakeRequested.UTC().Format(time.RFC3339), e.Annotations[render.AnnotationWakeRequested])
	resp, err = http.Post(h.url+api.EnvironmentsPath+"/nothing-here/wake", "", nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	// sync does not fight the wake: the next request comes sleepAfter after
	// it.
	h.clock.skipTo(woke.WakeRequested.Add(idle + time.Second))
	second := asked(woke.WakeRequested.Add(time.Second))
	assert.GreaterOrEqual(t, second.Sub(woke.WakeRequested), idle-time.Second)

	// The same for a wake by kubectl annotate.
	wake := h.clock.Now().UTC().Truncate(time.Second).Add(time.Second)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, render.AnnotationWakeRequested, wake.Format(time.RFC3339))
	require.NoError(t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}},
		client.RawPatch(types.MergePatchType, patch), client.FieldOwner("kubectl-annotate")))
	h.clock.skipTo(wake.Add(idle + time.Second))
	third := asked(wake.Add(time.Second))
	assert.GreaterOrEqual(t, third.Sub(wake), idle-time.Second)
}

// An expiry that could not be recorded in the comment deletes nothing; it
// is recorded (and the environment deleted) as soon as GitHub answers
// again, without waiting for the resync.
func TestExpiryIsRecordedBeforeTheEnvironmentGoes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: lifecycleFiles("4s", "")})
	pr, name := h.deployed()
	readyNow(t, h, name)
	seen := h.readyAt(pr.Number, "shop")
	h.clock.skipTo(seen.Add(3*time.Second + 200*time.Millisecond))
	h.waitComment(pr.Number, ":warning: **This environment expires at")

	editsFail := func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/issues/comments/")
	}
	h.gh.SetFault(&githubapi.Fault{Match: editsFail, Status: http.StatusInternalServerError})
	h.clock.skipTo(seen.Add(4*time.Second + 100*time.Millisecond))
	failed := func() bool {
		for _, r := range h.gh.Requests() {
			if r.Method == http.MethodPatch && r.Status == http.StatusInternalServerError {
				return true
			}
		}
		return false
	}
	require.Eventually(t, failed, 15*time.Second, 5*time.Millisecond, "the expiry was never tried")
	_, err := h.get(name)
	require.NoError(t, err, "deleted while its expiry was not in the comment")
	h.gh.SetFault(nil)

	h.waitGone(name)
	state, ok := render.ParseState(h.comment(pr.Number))
	require.True(t, ok)
	assert.Equal(t, pr.HeadSHA, state.Apps["shop"].ExpiredSHA)
}
