package syncer_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/webhook"
)

// A pull_request event without its pull request (an Event not built by the
// webhook handler) is a repository to reconcile, not a crash.
func TestPullRequestEventWithoutPullRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	h.s.Events() <- webhook.Event{Type: "pull_request", Repository: ghRepo, Received: h.clock.Now()}
	h.waitEnv(envName(pr.Number), nil)
}

// An environment sync owns that has no spec.source (written by hand, or by
// an older sync) does not crash the feedback: the pull request's comment
// still gets written, with a section for it.
func TestFeedbackForEnvironmentWithoutSource(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	legacy := &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-pr", Namespace: h.ns,
			Labels:      map[string]string{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: "legacy", render.LabelPullRequest: fmt.Sprint(pr.Number)},
			Annotations: map[string]string{render.AnnotationRepository: ghRepo}},
		Spec: petriv1.EphemeralEnvironmentSpec{Components: []petriv1.Component{{Name: "x", Chart: petriv1.ChartReference{Repository: "/charts/x", Name: "x", Version: "1.0.0"}}}},
	}
	require.NoError(t, h.c.Create(h.ctx, legacy))
	h.prEvent(pr.Number, "opened")
	h.waitEnv(envName(pr.Number), nil)
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "#### legacy") && strings.Contains(cs[0].Body, "#### shop")
	}, 15*time.Second, 10*time.Millisecond)
}

// Reading the environments for the API does not add state for the
// repositories it names.
func TestEnvironmentsReadWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	other := &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: "other-pr-1", Namespace: h.ns,
			Labels:      map[string]string{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: "other", render.LabelPullRequest: "1"},
			Annotations: map[string]string{render.AnnotationRepository: "acme/elsewhere"}},
		Spec: petriv1.EphemeralEnvironmentSpec{Components: []petriv1.Component{{Name: "x", Chart: petriv1.ChartReference{Repository: "/charts/x", Name: "x", Version: "1.0.0"}}}},
	}
	before := h.s.StateSize()
	require.NoError(t, h.c.Create(h.ctx, other))
	require.Eventually(t, func() bool {
		envs, err := h.s.Environments(h.ctx)
		return err == nil && len(envs) == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, before, h.s.StateSize())
}

// A shared workload whose chart repository never answers costs its
// resolution a bounded time: the config still loads and the applications
// are reconciled.
func TestSharedWorkloadChartResolutionIsBounded(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	never := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(never.Close)
	t.Cleanup(func() { close(stuck) }) // runs first: the handler returns, Close does not wait
	sw := fmt.Sprintf(`kind: SharedWorkload
name: postgres
spec:
  chart:
    repository: %s
    name: postgresql
    version: "~15"
`, never.URL)
	h := newHarness(t, harnessOptions{files: map[string]string{"shared/postgres.yaml": sw, "applications/shop.yaml": appYAML("")}, chartTimeout: 300 * time.Millisecond})
	h.deployed()
}

// A shared workload's provision container failed and its termination
// message (written by the shared workload's own image) holds a password:
// the commit status and the comment on the pull request name the Job and
// how to read its logs, never the message.
func TestProvisionOutputIsNotPostedOnThePullRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr, name := h.deployed()
	const output = "createdb: error: FATAL: role admin, password=hunter2 rejected"
	job := name + "-postgres-provision-g1-0a1b2c3d"
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.ObservedGeneration = e.Generation
		e.Status.Phase = petriv1.EnvironmentFailed
		e.Status.TargetNamespace = "shop-pr-x-ab12"
		e.Status.SharedWorkloads = []petriv1.BindingStatus{{Name: "postgres", Phase: petriv1.ComponentFailed, Job: job, Attempt: 1, LastError: output}}
		e.Status.Components = []petriv1.ComponentStatus{{Name: "api", Phase: petriv1.ComponentPending, Generation: e.Generation, Message: "blocked: shared workload postgres failed to bind: " + output}}
		for _, typ := range []string{petriv1.ConditionStalled, petriv1.ConditionReady} {
			st := metav1.ConditionTrue
			if typ == petriv1.ConditionReady {
				st = metav1.ConditionFalse
			}
			meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: typ, Status: st, Reason: petriv1.ReasonBindFailed, Message: "failed: postgres (" + output + ")", ObservedGeneration: e.Generation})
		}
	})
	var status githubapi.Status
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
		if len(sts) == 0 {
			return false
		}
		status = sts[len(sts)-1]
		return status.State == "failure"
	}, 10*time.Second, 10*time.Millisecond)
	assert.NotContains(t, status.Description, "hunter2")
	assert.Contains(t, status.Description, "withheld")
	var body string
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		if len(cs) != 1 {
			return false
		}
		body = cs[0].Body
		return strings.Contains(body, "| postgres | Failed |")
	}, 10*time.Second, 10*time.Millisecond)
	assert.NotContains(t, body, "hunter2")
	assert.Contains(t, body, fmt.Sprintf("`kubectl -n %s logs job/%s`", h.ns, job))
	for _, st := range h.gh.Statuses(ghRepo, pr.HeadSHA) {
		assert.NotContains(t, st.Description, "hunter2")
	}
}
