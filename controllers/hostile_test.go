// Defects found by reading the operator as an attacker and as an operator
// of many environments would: each test fails without its fix.

package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	t.Parallel()
	ctx := context.Background()
	slow := greeter("slow")
	slow.Release = petriv1.ReleaseOptions{Wait: new(true), Timeout: &metav1.Duration{Duration: 20 * time.Minute}}
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
	t.Parallel()
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

// TestFailedBindingBindsAgain: a binding whose provision step failed is not
// failed for the environment's life. Once the shared workload is fixed, a
// /petri redeploy binds it again (one environment), and so does a new
// generation (another): each with Jobs of their own, not the failed ones.
func TestFailedBindingBindsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw := sharedWorkload("flaky-db", recordDir(t))
	good := sw.Spec.Provision.DeepCopy()
	sw.Spec.Provision = &petriv1.ContainerTemplate{Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"fail", "1", "no database server yet"}}
	require.NoError(t, env.Client.Create(ctx, sw))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, sw) })
	failedBinding := func(e *petriv1.EphemeralEnvironment) bool {
		b := bindingNamed(e, "flaky-db")
		return b != nil && b.Phase == petriv1.ComponentFailed
	}
	for _, name := range []string{"rebind-redeploy", "rebind-generation"} {
		e := boundEnv(name, "flaky-db")
		require.NoError(t, env.Client.Create(ctx, e))
		t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
		waitFor(t, name, "binding failed", failedBinding)
	}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(sw), sw))
	sw.Spec.Provision = good
	require.NoError(t, env.Client.Update(ctx, sw))

	setRedeploy(t, "rebind-redeploy", "after-the-fix")
	waitFor(t, "rebind-redeploy", "bound again after the redeploy", ready)

	e := get(t, "rebind-generation")
	patch := client.MergeFrom(e.DeepCopy())
	e.Spec.Components[0].Chart.Version = "0.1.0"
	e.Spec.Values = map[string]apiextensionsv1.JSON{"app": {Raw: []byte(`{"greeting":"again"}`)}}
	require.NoError(t, env.Client.Patch(ctx, e, patch))
	waitFor(t, "rebind-generation", "bound again at the new generation", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Generation > 1 && ready(e)
	})
}

// TestOneBindDoesNotWakeTheOtherUsers (hostile-input defect 6): an
// environment binding a shared workload changes its count of bound
// environments, and that woke every other environment using it, each
// reading its RoleBinding from the API server: N environments binding cost
// N² passes. Now the four bound before read nothing while a fifth binds.
func TestOneBindDoesNotWakeTheOtherUsers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw := sharedWorkload("fanout-db", recordDir(t))
	require.NoError(t, env.Client.Create(ctx, sw))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, sw) })
	namespaces := map[string]string{}
	for i := 1; i <= 4; i++ {
		e := boundEnv(fmt.Sprintf("fanout-%d", i), sw.Name)
		require.NoError(t, env.Client.Create(ctx, e))
		t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	}
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("fanout-%d", i)
		namespaces[name] = waitFor(t, name, "Ready", ready).Status.TargetNamespace
	}
	before := map[string]int{}
	for name, ns := range namespaces {
		waitPassAfterLastWrite(t, name, ns)
		before[name] = roleBindingReadsIn(ns)
	}
	fifth := boundEnv("fanout-5", sw.Name)
	require.NoError(t, env.Client.Create(ctx, fifth))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, fifth) })
	waitFor(t, fifth.Name, "Ready", ready)
	require.Eventually(t, func() bool {
		s := getSW(sw.Name)
		return s != nil && s.Status.BoundEnvironments == 5
	}, 30*time.Second, 50*time.Millisecond, "the fifth counted")
	for name, ns := range namespaces {
		assert.Equal(t, before[name], roleBindingReadsIn(ns), "%s was not woken by the fifth's bind", name)
	}
}

// TestTransientErrorKeepsReady (hostile-input defect 12): a pass of a
// Ready environment that fails for a reason outside it (the API server
// answering 503) leaves Ready True, saying in Reconciling that it retries;
// Ready turned False before, and sync made that pending statuses on the
// pull request.
func TestTransientErrorKeepsReady(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "steady", succeedAll)
	ctx := context.Background()
	e := newEnv("steady", greeter("app"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, e.Name, "Ready", ready)
	failRequests(t, http.MethodGet, "/namespaces/"+e.Status.TargetNamespace+"/rolebindings/")

	patch := []byte(`{"metadata":{"annotations":{"test.petri.dev/poke":"1"}}}`)
	require.NoError(t, env.Client.Patch(ctx, e, client.RawPatch(types.MergePatchType, patch)))
	readyFalse := false
	retried := waitFor(t, e.Name, "retrying the failed pass", func(e *petriv1.EphemeralEnvironment) bool {
		if !conditionIs(e, petriv1.ConditionReady, metav1.ConditionTrue, "") {
			readyFalse = true
		}
		return conditionIs(e, petriv1.ConditionReconciling, metav1.ConditionTrue, "") &&
			strings.Contains(findCondition(e, petriv1.ConditionReconciling).Message, "retrying")
	})
	t.Log(findCondition(retried, petriv1.ConditionReconciling).Message)
	assert.False(t, readyFalse, "Ready stayed True")
	assert.True(t, conditionIs(retried, petriv1.ConditionReady, metav1.ConditionTrue, petriv1.ReasonSucceeded))
	assert.Equal(t, petriv1.EnvironmentReady, retried.Status.Phase)
}
