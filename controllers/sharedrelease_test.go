package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// getSW reads a shared workload for polling; nil when it cannot be read.
func getSW(name string) *petriv1.SharedWorkload {
	sw := &petriv1.SharedWorkload{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, sw); err != nil {
		return nil
	}
	return sw
}

// swJobs lists a shared workload's Jobs of one action.
func swJobs(t *testing.T, sw *petriv1.SharedWorkload, action string) []string {
	t.Helper()
	return jobNames(t, client.MatchingLabels{"petri.dev/shared-workload": sw.Name, contract.LabelAction: action})
}

// TestFailedSharedReleaseIsRetriedThenStallsItsEnvironments (hostile-input
// defect 4): a shared workload whose chart repository does not answer is
// deployed again with a new Job per attempt, after a backoff, and after its
// last attempt is Failed; an environment bound to it says Stalled, naming
// it, instead of waiting Reconciling for ever. Fixed, both go on.
func TestFailedSharedReleaseIsRetriedThenStallsItsEnvironments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw := sharedWorkload("unreachable-db", recordDir(t))
	sw.Spec.Chart = petriv1.ChartReference{Repository: "https://127.0.0.1:1/charts", Name: "greeter", Version: "0.1.0"}
	require.NoError(t, env.Client.Create(ctx, sw))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, sw) })
	e := boundEnv("uses-unreachable", sw.Name)
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })

	var last *petriv1.SharedWorkload
	require.Eventually(t, func() bool {
		last = getSW(sw.Name)
		return last != nil && apimeta.IsStatusConditionTrue(last.Status.Conditions, petriv1.ConditionStalled)
	}, 2*time.Minute, 50*time.Millisecond, "the shared workload fails for good")
	rel := last.Status.Release
	assert.EqualValues(t, 3, rel.Attempt, "three attempts")
	assert.Equal(t, "failed after 3 attempts", rel.Message)
	assert.Len(t, swJobs(t, last, contract.ActionDeploy), 3, "a Job per attempt")
	assert.Equal(t, petriv1.EnvironmentFailed, last.Status.Phase)

	stalled := waitFor(t, e.Name, "Stalled on the shared workload", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonBindFailed)
	})
	assert.Contains(t, findCondition(stalled, petriv1.ConditionStalled).Message, "shared workload unreachable-db is DeployFailed and not retried")

	last = getSW(sw.Name)
	last.Spec.Chart.Repository = imageCharts
	require.NoError(t, env.Client.Update(ctx, last))
	swReady(t, sw.Name)
	waitFor(t, e.Name, "Ready once the shared workload is", ready)
}

// lostSharedReleaseIsDeployedAgain (hostile-input defect 4): a
// deployed shared workload whose release is deleted behind Petri's back,
// and then whose whole namespace is, is found by its verify Job and by the
// namespace's UID, deployed again (status.recoveries), and the bound
// environment's provision step runs again in it; before, it stayed Ready
// with nothing behind it. It runs in TestPeriodicVerification, apart from
// the other tests of shared workloads: it deletes the shared namespace.
func lostSharedReleaseIsDeployedAgain(t *testing.T) {
	ctx := context.Background()
	sw := sharedWorkload("lost-db", recordDir(t))
	require.NoError(t, env.Client.Create(ctx, sw))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, sw) })
	e := boundEnv("uses-lost", sw.Name)
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, e.Name, "Ready", ready)
	first := swReady(t, sw.Name)
	require.NotEmpty(t, first.Status.NamespaceUID)

	provisions := func() int { return len(stepJobs(t, e.UID, contract.ActionProvision)) }
	require.Equal(t, 1, provisions())

	// The release record goes: the verify Job finds it missing.
	var records corev1.SecretList
	require.NoError(t, env.Client.List(ctx, &records, client.InNamespace(sharedNS), client.MatchingLabels{"owner": "helm", "name": sw.Name}))
	require.NotEmpty(t, records.Items)
	for i := range records.Items {
		require.NoError(t, env.Client.Delete(ctx, &records.Items[i]))
	}
	recovered := func(n int32) *petriv1.SharedWorkload {
		var got *petriv1.SharedWorkload
		require.Eventually(t, func() bool {
			got = getSW(sw.Name)
			return got != nil && got.Status.Recoveries == n && got.Status.Release != nil &&
				got.Status.Release.Phase == petriv1.ComponentDeployed && apimeta.IsStatusConditionTrue(got.Status.Conditions, petriv1.ConditionReady)
		}, 90*time.Second, 50*time.Millisecond, "recovery %d of the shared workload", n)
		return got
	}
	one := recovered(1)
	assert.True(t, strings.HasPrefix(one.Status.Release.Job, "lost-db-release-deploy-"), one.Status.Release.Job)
	assert.NotEqual(t, first.Status.Release.Job, one.Status.Release.Job, "a Job of its own")
	waitFor(t, e.Name, "provisioned again and Ready", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && len(e.Status.SharedWorkloads) == 1 && e.Status.SharedWorkloads[0].SharedRecovery == 1
	})
	assert.Equal(t, 2, provisions(), "the provision step ran again")

	// The whole shared namespace goes: its UID tells.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sharedNS}}
	require.NoError(t, env.Client.Delete(ctx, ns))
	two := recovered(2)
	assert.NotEqual(t, first.Status.NamespaceUID, two.Status.NamespaceUID, "deployed in the new namespace")
	waitFor(t, e.Name, "provisioned in the new namespace and Ready", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && len(e.Status.SharedWorkloads) == 1 && e.Status.SharedWorkloads[0].SharedRecovery == 2
	})
	assert.Equal(t, 3, provisions())
}
