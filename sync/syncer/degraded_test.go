package syncer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	pr, name := h.deployed()
	latest := func() githubapi.Status { return h.lastStatus(pr.HeadSHA) }
	setReady := func(phase petriv1.EnvironmentPhase, readyCond metav1.Condition) {
		setStatus(t, h, name, deployedAs(phase, readyCond))
	}
	setReady(petriv1.EnvironmentReady, readyTrue)
	require.Eventually(t, func() bool { return latest().State == "success" }, 10*time.Second, 10*time.Millisecond)

	why := "Deployment web: Available: 0/1; StatefulSet db: scaled to 0 replicas; its release asks for 1"
	setReady(petriv1.EnvironmentDegraded, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonWorkloadsUnhealthy, Message: why})
	require.Eventually(t, func() bool { return latest().State == "failure" }, 10*time.Second, 10*time.Millisecond, "last status: %+v", latest())
	assert.Equal(t, "Environment stopped running: "+why, latest().Description)
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, pr.Number)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "Deployment web: Available: 0/1")
	}, 10*time.Second, 10*time.Millisecond, "the comment names what stopped: %v", h.gh.Comments(ghRepo, pr.Number))

	setReady(petriv1.EnvironmentReady, readyTrue)
	require.Eventually(t, func() bool { return latest().State == "success" }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, fmt.Sprintf("https://pr-%d.shop.test", pr.Number), latest().TargetURL)
}
