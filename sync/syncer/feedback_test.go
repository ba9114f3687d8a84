package syncer_test

import (
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
)

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
	start := wall.Now()
	require.NoError(t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: envName(first.Number)}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
	h.waitGone(envName(first.Number))
	h.waitEnv(envName(waiting.Number), nil)
	t.Logf("freed slot to the waiting pull request's environment: %s", wall.Since(start).Round(time.Millisecond))
	assert.Less(t, wall.Since(start), 5*time.Second)

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
	pr, name := h.deployed()
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.ObservedGeneration = e.Generation
		e.Status.Phase = petriv1.EnvironmentFailed
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed, ObservedGeneration: e.Generation})
		e.Status.Components = []petriv1.ComponentStatus{
			{Name: "api", Phase: petriv1.ComponentDeployed, Generation: e.Generation},
			{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, Job: name + "-web-deploy-g1-0a1b2c3d", LastError: "ChartNotFound: web 1.4.2 is not in the repository"},
		}
	})
	h.waitComment(pr.Number, fmt.Sprintf("| web | web 1.4.2 | Failed | `ChartNotFound: web 1.4.2 is not in the repository` (Job `%[1]s-web-deploy-g1-0a1b2c3d`; its log: `kubectl -n %[2]s logs job/%[1]s-web-deploy-g1-0a1b2c3d`) |", name, h.ns))
}

func setStatus(t *testing.T, h *harness, name string, change func(*petriv1.EphemeralEnvironment)) {
	t.Helper()
	require.Eventually(t, func() bool {
		e, err := h.get(name)
		if err != nil {
			return false
		}
		change(e)
		return h.c.Status().Update(h.ctx, e) == nil
	}, 10*time.Second, 10*time.Millisecond)
}

func TestFeedbackStatusAndSingleComment(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr, name := h.deployed()

	latest := func() githubapi.Status { return h.lastStatus(pr.HeadSHA) }
	require.Eventually(t, func() bool { return latest().State == "pending" }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "petri/shop", latest().Context)
	require.Eventually(t, func() bool { return len(h.gh.Comments(ghRepo, pr.Number)) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, h.gh.Comments(ghRepo, pr.Number)[0].Body, "(not assigned yet)")

	// The operator (played by the test) reports Ready.
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.ObservedGeneration = e.Generation
		e.Status.TargetNamespace = "shop-pr-x-ab12"
		e.Status.Phase = petriv1.EnvironmentReady
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionTrue, Reason: petriv1.ReasonSucceeded, ObservedGeneration: e.Generation})
		e.Status.Components = []petriv1.ComponentStatus{{Name: "api", Phase: petriv1.ComponentDeployed, Generation: e.Generation}, {Name: "web", Phase: petriv1.ComponentDeployed, Generation: e.Generation}}
	})
	require.Eventually(t, func() bool { return latest().State == "success" }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, fmt.Sprintf("https://pr-%d.shop.test", pr.Number), latest().TargetURL)
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "`shop-pr-x-ab12`")
	}, 10*time.Second, 10*time.Millisecond)
	body := h.gh.Comments(ghRepo, pr.Number)[0].Body
	assert.Contains(t, body, fmt.Sprintf("https://pr-%d.shop.test", pr.Number))
	assert.Contains(t, body, "| api | api 0.9.1 | Deployed |")
	assert.Contains(t, body, "| web | web 1.4.2 | Deployed |")

	// A failure with a reason.
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.Phase = petriv1.EnvironmentFailed
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed, Message: "web failed", ObservedGeneration: e.Generation})
		e.Status.Components[1] = petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, LastError: "ImagePullBackOff: web:abc"}
	})
	require.Eventually(t, func() bool { return latest().State == "failure" }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, latest().Description, "web: ImagePullBackOff: web:abc")
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "ImagePullBackOff")
	}, 10*time.Second, 10*time.Millisecond)

	// Resyncs and unrelated status writes post nothing new.
	h.resync()
	h.resync()
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.ExpiresAt = &metav1.Time{Time: h.clock.Now().Add(time.Hour)}
	})
	h.resync()
	sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
	var states []string
	for _, s := range sts {
		states = append(states, s.State)
	}
	assert.Equal(t, []string{"pending", "success", "failure"}, states, "one status per transition, never a duplicate")
	cs := h.gh.Comments(ghRepo, pr.Number)
	require.Len(t, cs, 1, "exactly one comment")
	assert.GreaterOrEqual(t, cs[0].Edits, 2, "the comment is edited in place")

	// A person's comment is left alone; closing edits ours once more.
	h.gh.AddComment(ghRepo, pr.Number, "bob", "looks good")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(pr.Number, "closed")
	h.waitGone(name)
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		return len(cs) == 2 && strings.Contains(cs[0].Body, "Environment deleted: pull request closed") && cs[1].Body == "looks good"
	}, 10*time.Second, 10*time.Millisecond)
}

func TestArtifactGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("artifactGate:\n  checkRun: build-image\n")})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.gh.SetCheckRun(ghRepo, pr.HeadSHA, githubapi.CheckRun{Name: "build-image", Status: "in_progress"})
	h.prEvent(pr.Number, "opened")
	h.resync()
	_, err := h.get(name)
	require.Error(t, err, "created before its image was built")
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
		return len(sts) > 0 && sts[len(sts)-1].State == "pending" && strings.Contains(sts[len(sts)-1].Description, "check run build-image")
	}, 10*time.Second, 10*time.Millisecond)

	// The build finishes: the check_run webhook creates the environment.
	run := githubapi.CheckRun{Name: "build-image", Status: "completed", Conclusion: "success"}
	h.gh.SetCheckRun(ghRepo, pr.HeadSHA, run)
	d, err := h.gh.CheckRunEvent(ghRepo, pr.Number, pr.HeadSHA, run)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == pr.HeadSHA })

	// A push whose build is still running changes nothing.
	second := githubapi.SHA("second")
	h.gh.SetCheckRun(ghRepo, second, githubapi.CheckRun{Name: "build-image", Status: "queued"})
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = second; p.Title = "renamed" })
	h.prEvent(pr.Number, "synchronize")
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, second)
		return len(sts) > 0 && strings.Contains(sts[len(sts)-1].Description, "waiting for check run build-image on "+second[:7])
	}, 10*time.Second, 10*time.Millisecond)
	h.resync()
	e, err := h.get(name)
	require.NoError(t, err)
	assert.Equal(t, pr.HeadSHA, e.Spec.Source.SHA, "the environment keeps the commit whose image exists")
	assert.Equal(t, pr.HeadSHA[:7], values(t, e, "api")["image"].(map[string]any)["tag"])

	// A failed build does not deploy either.
	failed := githubapi.CheckRun{Name: "build-image", Status: "completed", Conclusion: "failure"}
	h.gh.SetCheckRun(ghRepo, second, failed)
	d, err = h.gh.CheckRunEvent(ghRepo, pr.Number, second, failed)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	h.resync()
	e, err = h.get(name)
	require.NoError(t, err)
	assert.Equal(t, pr.HeadSHA, e.Spec.Source.SHA)

	// The re-run turns green: the webhook moves the environment on.
	h.gh.SetCheckRun(ghRepo, second, run)
	d, err = h.gh.CheckRunEvent(ghRepo, pr.Number, second, run)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	e = h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == second })
	assert.Equal(t, second[:7], values(t, e, "api")["image"].(map[string]any)["tag"])
	assert.Equal(t, "renamed", values(t, e, "web")["title"])
}

func TestStatusContextGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("artifactGate:\n  statusContext: ci/image\n")})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	h.prEvent(pr.Number, "opened")
	h.resync()
	_, err := h.get(envName(pr.Number))
	require.Error(t, err)
	h.gh.SetStatus(ghRepo, pr.HeadSHA, "ci/image", "success")
	d, err := h.gh.StatusEvent(ghRepo, pr.HeadSHA, "ci/image", "success")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	h.waitEnv(envName(pr.Number), nil)
}

func TestCapOnEnvironments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("maxEnvironments: 2\n")})
	var prs []githubapi.PullRequest
	for range 3 {
		prs = append(prs, h.open(githubapi.PullRequest{Labels: []string{"preview"}}))
	}
	h.waitEnv(envName(prs[0].Number), nil)
	h.waitEnv(envName(prs[1].Number), nil)
	h.resync()
	_, err := h.get(envName(prs[2].Number))
	require.Error(t, err, "the newest pull request beyond the cap waits")
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, prs[2].HeadSHA)
		return len(sts) > 0 && sts[len(sts)-1].State == "pending" && strings.Contains(sts[len(sts)-1].Description, "maximum of 2")
	}, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, prs[2].Number)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "waiting for a free environment")
	}, 10*time.Second, 10*time.Millisecond)

	h.gh.UpdatePullRequest(ghRepo, prs[0].Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(prs[0].Number, "closed")
	h.waitGone(envName(prs[0].Number))
	h.waitEnv(envName(prs[2].Number), nil)
}
