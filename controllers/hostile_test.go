// Defects found by reading the operator as an attacker and as an operator
// of many environments would: each test fails without its fix.

package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// TestJobDeadlineCoversTheReleaseTimeout: a deploy that may wait 20
// minutes (release.wait, release.timeout) runs in a Job whose deadline is
// longer than that, not the operator's 15-minute default that would kill
// Helm midway and leave a pending release; a component with no timeout
// keeps the default.
func TestJobDeadlineCoversTheReleaseTimeout(t *testing.T) {
	ctx := context.Background()
	slow := greeter("slow")
	slow.Release = petriv1.ReleaseOptions{Wait: true, Timeout: &metav1.Duration{Duration: 20 * time.Minute}}
	e := newEnv("deadline", slow, greeter("quick"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, "deadline", "bound", bound)
	deadlines := map[string]int64{}
	require.Eventually(t, func() bool {
		for _, j := range stepJobs(t, e.UID, "deploy") {
			if j.Spec.ActiveDeadlineSeconds != nil {
				deadlines[j.Labels[contract.LabelComponent]] = *j.Spec.ActiveDeadlineSeconds
			}
		}
		return len(deadlines) == 2
	}, time.Minute, 50*time.Millisecond, "both deploy Jobs")
	assert.Equal(t, int64((25 * time.Minute).Seconds()), deadlines["slow"], "the release's 20 minutes and the margin")
	assert.Equal(t, int64((15 * time.Minute).Seconds()), deadlines["quick"], "the operator's default")
}

// TestDeletedDeployerIdentityIsMadeAgain: the deployer ServiceAccount
// deleted after the environment's Jobs ran is created again at once, and the
// environment's next Job runs (a redeploy), instead of every pod being
// refused until its Job's deadline.
func TestDeletedDeployerIdentityIsMadeAgain(t *testing.T) {
	ctx := context.Background()
	e := newEnv("lost-identity", greeter("app"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, "lost-identity", "Ready", ready)
	key := client.ObjectKey{Namespace: mgmtNS, Name: naming.DeployerServiceAccount(e.Name)}
	var sa corev1.ServiceAccount
	require.NoError(t, env.Client.Get(ctx, key, &sa))
	old := sa.UID
	require.NoError(t, env.Client.Delete(ctx, &sa))
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, key, &sa) == nil && sa.UID != old
	}, 30*time.Second, 50*time.Millisecond, "the deployer ServiceAccount is created again")
	setRedeploy(t, e.Name, "after-identity-lost")
	waitFor(t, "lost-identity", "redeployed as the new identity", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.LastRedeploy == "after-identity-lost" && ready(e)
	})
}
