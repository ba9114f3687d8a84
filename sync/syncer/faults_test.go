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
	h.s.Events() <- webhook.Event{Type: "pull_request", Repository: ghRepo, Received: time.Now()}
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
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(pr.Number), nil)
}
