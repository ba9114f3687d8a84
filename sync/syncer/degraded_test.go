package syncer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
)

// An environment the operator marks Degraded (deployed, but a workload
// stopped running) serves nothing: its commit status is a failure that
// names what stopped and why, as the operator said it, and its comment
// says so; healed, it is a success again.
func TestDegradedEnvironmentIsReportedFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	latest := func() githubapi.Status {
		sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
		if len(sts) == 0 {
			return githubapi.Status{}
		}
		return sts[len(sts)-1]
	}
	setReady := func(phase petriv1.EnvironmentPhase, ready metav1.Condition) {
		setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
			e.Status.ObservedGeneration = e.Generation
			e.Status.TargetNamespace = "shop-pr-x-ab12"
			e.Status.Phase = phase
			ready.ObservedGeneration = e.Generation
			meta.SetStatusCondition(&e.Status.Conditions, ready)
			e.Status.Components = []petriv1.ComponentStatus{{Name: "api", Phase: petriv1.ComponentDeployed, Generation: e.Generation}, {Name: "web", Phase: petriv1.ComponentDeployed, Generation: e.Generation}}
		})
	}
	setReady(petriv1.EnvironmentReady, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionTrue, Reason: petriv1.ReasonSucceeded})
	require.Eventually(t, func() bool { return latest().State == "success" }, 10*time.Second, 10*time.Millisecond)

	why := "Deployment web: Available: 0/1; StatefulSet db: scaled to 0 replicas; its release asks for 1"
	setReady(petriv1.EnvironmentDegraded, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonWorkloadsUnhealthy, Message: why})
	require.Eventually(t, func() bool { return latest().State == "failure" }, 10*time.Second, 10*time.Millisecond, "last status: %+v", latest())
	assert.Equal(t, "Environment stopped running: "+why, latest().Description)
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "Deployment web: Available: 0/1")
	}, 10*time.Second, 10*time.Millisecond, "the comment names what stopped: %v", h.gh.Comments(ghRepo, pr.Number))

	setReady(petriv1.EnvironmentReady, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionTrue, Reason: petriv1.ReasonSucceeded})
	require.Eventually(t, func() bool { return latest().State == "success" }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, fmt.Sprintf("https://pr-%d.shop.test", pr.Number), latest().TargetURL)
}
