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

// comment is sync's comment on a pull request ("" when there is none).
func (h *harness) comment(number int) string {
	for _, c := range h.gh.Comments(ghRepo, number) {
		if strings.Contains(c.Body, render.CommentMarker) {
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

func (h *harness) latestStatus(sha string) githubapi.Status {
	sts := h.gh.Statuses(ghRepo, sha)
	if len(sts) == 0 {
		return githubapi.Status{}
	}
	return sts[len(sts)-1]
}

// command posts a comment as a person and delivers its issue_comment
// webhook.
func (h *harness) command(number int, author, body string) githubapi.Comment {
	h.t.Helper()
	c := h.gh.AddComment(ghRepo, number, author, body)
	d, err := h.gh.IssueCommentEvent(ghRepo, number, c.ID)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusAccepted, h.send(d))
	return c
}

func (h *harness) waitReaction(c githubapi.Comment, content string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		rs := h.gh.Reactions(ghRepo, c.ID)
		return len(rs) == 1 && rs[0].Content == content
	}, 15*time.Second, 10*time.Millisecond, "comment %d (%q) never got %s: %+v", c.ID, c.Body, content, h.gh.Reactions(ghRepo, c.ID))
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

	readyAt := time.Now()
	readyNow(t, h, name)
	h.waitComment(pr.Number, "(ttl 6s from the first deploy of its commit)")
	// The warning comes before the expiry (a quarter of the ttl before).
	h.waitComment(pr.Number, ":warning: **This environment expires at")
	_, err := h.get(name)
	require.NoError(t, err, "warned, not yet expired")

	h.waitGone(name)
	assert.GreaterOrEqual(t, time.Since(readyAt), ttl-time.Second, "expired after its ttl, counted from Ready")
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
	assert.Never(t, func() bool {
		_, err := h.get(name)
		return err != nil
	}, ttl+2*time.Second, 50*time.Millisecond, "a kept environment expired")

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

// Commands from people with write access act (with a +1 and a reply);
// anyone else's are refused (-1, and why); each is acted on once, also by a
// new sync process; one whose webhook never arrived is found by the resync,
// and one written while sync was down by the next sync.
func TestPullRequestCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetPermission(ghRepo, "alice", "write")
	h.gh.SetPermission(ghRepo, "mia", "maintain")
	h.gh.SetPermission(ghRepo, "bob", "read")
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	readyNow(t, h, name)
	h.waitComment(pr.Number, "- Expires: ")
	annotations := func() map[string]string {
		e, err := h.get(name)
		require.NoError(t, err)
		return e.Annotations
	}

	refused := h.command(pr.Number, "bob", "/petri sleep")
	h.waitReaction(refused, "-1")
	h.waitComment(pr.Number, "`/petri sleep` from @bob: refused: @bob needs write access to acme/shop (has read)")
	assert.NotContains(t, annotations(), render.AnnotationSleepRequested)

	sleep := h.command(pr.Number, "alice", "/petri sleep")
	h.waitReaction(sleep, "+1")
	h.waitComment(pr.Number, "`/petri sleep` from @alice: shop goes to sleep")
	assert.Equal(t, sleep.CreatedAt.UTC().Format(time.RFC3339), annotations()[render.AnnotationSleepRequested])
	e, _ := h.get(name)
	assert.Contains(t, managers(e, render.AnnotationSleepRequested), "petri-sync-sleep-requested", "sync owns the annotation it set, under its own field manager")

	wake := h.command(pr.Number, "mia", "Waking it up:\n/petri wake")
	h.waitReaction(wake, "+1")
	h.waitComment(pr.Number, "`/petri wake` from @mia: shop wakes up")
	assert.Equal(t, wake.CreatedAt.UTC().Format(time.RFC3339), annotations()[render.AnnotationWakeRequested])

	redeploy := h.command(pr.Number, "alice", "/petri redeploy")
	h.waitReaction(redeploy, "+1")
	h.waitComment(pr.Number, "`/petri redeploy` from @alice: shop deploys every component again")
	assert.Equal(t, fmt.Sprintf("comment-%d", redeploy.ID), annotations()[render.AnnotationRedeploy], "a new value asks the operator for one redeploy")

	before := expiresAt(t, h.comment(pr.Number))
	extend := h.command(pr.Number, "alice", "/petri extend 2h")
	h.waitReaction(extend, "+1")
	body := h.waitComment(pr.Number, "`/petri extend 2h` from @alice: shop expires at")
	assert.Equal(t, before.Add(2*time.Hour), expiresAt(t, body))

	keep := h.command(pr.Number, "alice", "/petri keep")
	h.waitReaction(keep, "+1")
	h.waitComment(pr.Number, "- Expiry: suspended by `/petri keep`")

	bad := h.command(pr.Number, "alice", "/petri extend forever")
	h.waitReaction(bad, "-1")
	h.waitComment(pr.Number, `/petri extend forever`+"` from @alice: not understood: \"forever\" is not a duration")

	// Each is acted on once: not again by a resync, nor by a new sync
	// process that reads what was handled from the comment.
	acted := annotations()
	notes := h.comment(pr.Number)
	h.resync()
	h.restart()
	h.resync()
	for _, c := range []githubapi.Comment{refused, sleep, wake, redeploy, extend, keep, bad} {
		assert.Equal(t, 1, requests(h.gh, http.MethodPost, fmt.Sprintf("/issues/comments/%d/reactions", c.ID)), "comment %q handled twice", c.Body)
	}
	for _, k := range []string{render.AnnotationSleepRequested, render.AnnotationWakeRequested, render.AnnotationRedeploy} {
		assert.Equal(t, acted[k], annotations()[k], "%s set again", k)
	}
	assert.Equal(t, notes, h.comment(pr.Number), "nothing acted on twice")

	// A command whose webhook never arrived: the resync finds it.
	lost := h.gh.AddComment(ghRepo, pr.Number, "alice", "/petri sleep")
	h.resync()
	h.waitReaction(lost, "+1")
	require.Eventually(t, func() bool {
		return annotations()[render.AnnotationSleepRequested] == lost.CreatedAt.UTC().Format(time.RFC3339)
	}, 10*time.Second, 10*time.Millisecond)

	// One written while sync was down: the next sync finds it at start.
	h.stop()
	down := h.gh.AddComment(ghRepo, pr.Number, "alice", "/petri wake")
	h.start()
	h.waitReaction(down, "+1")
	h.waitComment(pr.Number, "`/petri wake` from @alice: shop wakes up")
	assert.Len(t, h.gh.Comments(ghRepo, pr.Number), 10, "sync's comment and nine commands, nothing more")

	// sync's own apply (a push) neither removes the annotations it set
	// under their own managers nor one a person set with kubectl.
	patch := []byte(`{"metadata":{"annotations":{"team":"checkout"}}}`)
	require.NoError(t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}},
		client.RawPatch(types.MergePatchType, patch), client.FieldOwner("kubectl-annotate")))
	second := githubapi.SHA("push after commands")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = second })
	h.prEvent(pr.Number, "synchronize")
	e = h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == second })
	assert.Equal(t, "checkout", e.Annotations["team"])
	assert.Equal(t, down.CreatedAt.UTC().Format(time.RFC3339), e.Annotations[render.AnnotationWakeRequested])
	assert.Equal(t, lost.CreatedAt.UTC().Format(time.RFC3339), e.Annotations[render.AnnotationSleepRequested])
	assert.Equal(t, fmt.Sprintf("comment-%d", redeploy.ID), e.Annotations[render.AnnotationRedeploy])
}

// managers lists the field managers that own an annotation.
func managers(e *petriv1.EphemeralEnvironment, key string) []string {
	var out []string
	for _, mf := range e.ManagedFields {
		if mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), `"f:`+key+`"`) {
			out = append(out, mf.Manager)
		}
	}
	return out
}

// expiresAt reads the expiry the comment shows.
func expiresAt(t *testing.T, body string) time.Time {
	t.Helper()
	_, rest, ok := strings.Cut(body, "- Expires: ")
	require.True(t, ok, body)
	ts, _, _ := strings.Cut(rest, " (")
	at, err := time.Parse("2006-01-02 15:04:05 UTC", ts)
	require.NoError(t, err, body)
	return at
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
	second := asked(woke.WakeRequested.Add(time.Second))
	assert.GreaterOrEqual(t, second.Sub(woke.WakeRequested), idle-time.Second)

	// The same for a wake by kubectl annotate.
	wake := time.Now().UTC().Truncate(time.Second).Add(time.Second)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, render.AnnotationWakeRequested, wake.Format(time.RFC3339))
	require.NoError(t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}},
		client.RawPatch(types.MergePatchType, patch), client.FieldOwner("kubectl-annotate")))
	third := asked(wake.Add(time.Second))
	assert.GreaterOrEqual(t, third.Sub(wake), idle-time.Second)
}

// With deployments: true each environment is a GitHub deployment of its
// head commit, whose statuses follow it; a push makes a new one (the old
// one inactive), closing makes it inactive; a new sync process neither
// creates a second deployment nor repeats a status.
func TestGitHubDeployments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("deployments: true\n")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	environment := fmt.Sprintf("petri/shop-pr-%d", pr.Number)
	statesOf := func(id int64) []string {
		var out []string
		for _, st := range h.gh.DeploymentStatuses(ghRepo, id) {
			out = append(out, st.State)
		}
		return out
	}
	var first githubapi.Deployment
	require.Eventually(t, func() bool {
		ds := h.gh.Deployments(ghRepo)
		if len(ds) != 1 {
			return false
		}
		first = ds[0]
		return len(statesOf(first.ID)) == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, pr.HeadSHA, first.Ref)
	assert.Equal(t, environment, first.Environment)
	assert.True(t, first.TransientEnvironment)
	assert.False(t, first.ProductionEnvironment)
	require.NotNil(t, first.AutoMerge)
	assert.False(t, *first.AutoMerge)
	require.NotNil(t, first.RequiredContexts)
	assert.Empty(t, *first.RequiredContexts)
	assert.Equal(t, []string{"in_progress"}, statesOf(first.ID))

	readyNow(t, h, name)
	require.Eventually(t, func() bool { return len(statesOf(first.ID)) == 2 }, 10*time.Second, 10*time.Millisecond)
	sts := h.gh.DeploymentStatuses(ghRepo, first.ID)
	assert.Equal(t, "success", sts[1].State)
	assert.Equal(t, fmt.Sprintf("https://pr-%d.shop.test", pr.Number), sts[1].EnvironmentURL)

	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.Phase = petriv1.EnvironmentFailed
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed, ObservedGeneration: e.Generation})
		e.Status.Components[1] = petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, LastError: "ImagePullBackOff: web:abc", Job: "web-deploy-job"}
	})
	require.Eventually(t, func() bool { return len(statesOf(first.ID)) == 3 }, 10*time.Second, 10*time.Millisecond)
	sts = h.gh.DeploymentStatuses(ghRepo, first.ID)
	assert.Equal(t, "failure", sts[2].State)
	assert.Equal(t, "Deploy failed: web: ImagePullBackOff: web:abc", sts[2].Description)

	// A new sync process: no second deployment, no repeated status. The
	// state it reads back is what the comment records; the process is
	// stopped once the comment has the failure (a process stopped between
	// posting a status and recording it posts it again: at least once).
	require.Eventually(t, func() bool {
		state, ok := render.ParseState(h.comment(pr.Number))
		return ok && state.Apps["shop"] != nil && state.Apps["shop"].DeploymentState == "failure"
	}, 10*time.Second, 10*time.Millisecond, "the comment records the failure")
	h.restart()
	h.resync()
	h.prEvent(pr.Number, "assigned")
	h.resync()
	assert.Len(t, h.gh.Deployments(ghRepo), 1)
	assert.Equal(t, []string{"in_progress", "success", "failure"}, statesOf(first.ID))

	// A push: a deployment of the new commit, the old one inactive.
	second := githubapi.SHA("deploy again")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = second })
	h.prEvent(pr.Number, "synchronize")
	var next githubapi.Deployment
	require.Eventually(t, func() bool {
		ds := h.gh.Deployments(ghRepo)
		if len(ds) != 2 {
			return false
		}
		next = ds[1]
		return len(statesOf(next.ID)) == 1 && len(statesOf(first.ID)) == 4
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, second, next.Ref)
	assert.Equal(t, "inactive", statesOf(first.ID)[3])
	assert.Equal(t, []string{"in_progress"}, statesOf(next.ID))

	// Closed: inactive.
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(pr.Number, "closed")
	h.waitGone(name)
	require.Eventually(t, func() bool {
		st := statesOf(next.ID)
		return len(st) == 2 && st[1] == "inactive"
	}, 10*time.Second, 10*time.Millisecond, "%v", statesOf(next.ID))
	last := h.gh.DeploymentStatuses(ghRepo, next.ID)[1]
	assert.Equal(t, "Environment deleted: pull request closed", last.Description)
}

// Under maxEnvironments an environment holds its slot until it is gone;
// then the waiting pull request gets it at once, not at the next resync
// (an hour away here). A config change that raises the cap acts at once
// too.
func TestFreedSlotIsGivenAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("maxEnvironments: 1\n")})
	first := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(first.Number), nil)
	// The operator's finalizer keeps it while its teardown runs.
	patch := []byte(`{"metadata":{"finalizers":["petri.dev/cleanup"]}}`)
	require.NoError(t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: envName(first.Number)}}, client.RawPatch(types.MergePatchType, patch)))
	waiting := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitComment(waiting.Number, "waiting for a free environment: shop has its maximum of 1")

	h.gh.UpdatePullRequest(ghRepo, first.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(first.Number, "closed")
	h.waitEnv(envName(first.Number), func(e *petriv1.EphemeralEnvironment) bool { return e.DeletionTimestamp != nil })
	h.resync()
	_, err := h.get(envName(waiting.Number))
	require.Error(t, err, "the slot is held while the environment is being deleted")

	// The teardown ends: the slot is free, and given at once.
	start := time.Now()
	require.NoError(t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: envName(first.Number)}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	h.waitGone(envName(first.Number))
	h.waitEnv(envName(waiting.Number), nil)
	t.Logf("freed slot to the waiting pull request's environment: %s", time.Since(start).Round(time.Millisecond))
	assert.Less(t, time.Since(start), 5*time.Second)

	// A config change that raises the cap: the next one gets its
	// environment at once.
	third := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitComment(third.Number, "waiting for a free environment")
	h.pushConfig(shopFiles("maxEnvironments: 2\n"))
	h.waitEnv(envName(third.Number), nil)
}

// A failed component's row names its Job, its reason and the command that
// shows the Job's log.
func TestFailedComponentRowNamesItsJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.ObservedGeneration = e.Generation
		e.Status.Phase = petriv1.EnvironmentFailed
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed, ObservedGeneration: e.Generation})
		e.Status.Components = []petriv1.ComponentStatus{
			{Name: "api", Phase: petriv1.ComponentDeployed, Generation: e.Generation},
			{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, Job: name + "-web-deploy-g1-0a1b2c3d", LastError: "ChartNotFound: web 1.4.2 is not in the repository"},
		}
	})
	h.waitComment(pr.Number, fmt.Sprintf("| web | web 1.4.2 | Failed | ChartNotFound: web 1.4.2 is not in the repository (Job `%[1]s-web-deploy-g1-0a1b2c3d`; its log: `kubectl -n %[2]s logs job/%[1]s-web-deploy-g1-0a1b2c3d`) |", name, h.ns))
}

// A command sent to a replica that does not lead is acted on by the
// leader, once.
func TestCommandToTheFollowerIsActedOnByTheLeader(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	a := rs.start("a")
	rs.waitLeader(a, 20*time.Second)
	b := rs.start("b")
	gh := rs.h.gh
	gh.SetPermission(ghRepo, "alice", "admin")
	pr := openPR(t, gh, a)
	name := envName(pr.Number)
	rs.h.waitEnv(name, nil)

	c := gh.AddComment(ghRepo, pr.Number, "alice", "/petri sleep")
	d, err := gh.IssueCommentEvent(ghRepo, pr.Number, c.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, b.send(t, d))
	require.Eventually(t, func() bool {
		e, err := rs.h.get(name)
		return err == nil && e.Annotations[render.AnnotationSleepRequested] != ""
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return len(gh.Reactions(ghRepo, c.ID)) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "+1", gh.Reactions(ghRepo, c.ID)[0].Content)
	assert.Equal(t, 1.0, b.handovers(t, "recorded"), "the follower handed it over")
}

// An expiry that could not be recorded in the comment deletes nothing; it
// is recorded (and the environment deleted) as soon as GitHub answers
// again, without waiting for the resync.
func TestExpiryIsRecordedBeforeTheEnvironmentGoes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: lifecycleFiles("4s", "")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	readyNow(t, h, name)
	h.waitComment(pr.Number, ":warning: **This environment expires at")

	editsFail := func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/issues/comments/")
	}
	h.gh.SetFault(&githubapi.Fault{Match: editsFail, Status: http.StatusInternalServerError})
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

// A delivery is a hint: the command, its author and its text are read from
// GitHub, so a delivery signed with the webhook secret but claiming another
// author, or a comment that does not exist, changes nothing.
func TestForgedCommandDeliveryIsNotActedOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetPermission(ghRepo, "alice", "admin")
	h.gh.SetPermission(ghRepo, "bob", "read")
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)

	send := func(d githubapi.Delivery, edit func(map[string]any)) {
		var p map[string]any
		require.NoError(t, json.Unmarshal(d.Body, &p))
		edit(p)
		body, err := json.Marshal(p)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, h.send(githubapi.Delivery{Event: d.Event, Body: body}))
	}
	bobs := h.gh.AddComment(ghRepo, pr.Number, "bob", "/petri sleep")
	d, err := h.gh.IssueCommentEvent(ghRepo, pr.Number, bobs.ID)
	require.NoError(t, err)
	send(d, func(p map[string]any) { p["comment"].(map[string]any)["user"].(map[string]any)["login"] = "alice" })
	send(d, func(p map[string]any) {
		c := p["comment"].(map[string]any)
		c["id"], c["body"] = 99999999, "/petri redeploy"
		c["user"].(map[string]any)["login"] = "alice"
	})
	h.waitReaction(bobs, "-1")
	h.waitComment(pr.Number, "`/petri sleep` from @bob: refused: @bob needs write access to acme/shop (has read)")
	h.resync()
	e, err := h.get(name)
	require.NoError(t, err)
	assert.NotContains(t, e.Annotations, render.AnnotationSleepRequested)
	assert.NotContains(t, e.Annotations, render.AnnotationRedeploy)
	assert.NotContains(t, h.comment(pr.Number), "@alice")
}
