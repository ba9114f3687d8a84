package controllers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// Environments whose names differ only where a ServiceAccount name cannot
// (web.pr1, web-pr1) get a deployer identity each, marked as theirs; deleting
// one leaves the other's identity alone.
func TestLookalikeEnvironmentsHaveTheirOwnDeployerIdentity(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "idn.pr1", succeedAll)
	standIn(t, "idn-pr1", succeedAll)
	ctx := context.Background()
	// One after the other: their namespace names collide too, which is
	// another test's subject.
	require.NoError(t, env.Client.Create(ctx, newEnv("idn.pr1", greeter("app"))))
	dotted := waitFor(t, "idn.pr1", "ready", ready)
	require.NoError(t, env.Client.Create(ctx, newEnv("idn-pr1", greeter("app"))))
	dashed := waitFor(t, "idn-pr1", "ready", ready)

	identity := func(e *petriv1.EphemeralEnvironment) *corev1.ServiceAccount {
		t.Helper()
		sa := &corev1.ServiceAccount{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: naming.DeployerServiceAccount(e.Name)}, sa))
		assert.True(t, metav1.IsControlledBy(sa, e), "%s is controlled by %s", sa.Name, e.Name)
		assert.Equal(t, string(e.UID), sa.Labels[petriv1.LabelEnvironmentUID])
		assert.Equal(t, string(e.UID), sa.Annotations[petriv1.AnnotationEnvironmentUID])
		assert.Equal(t, mgmtNS+"/"+e.Name, sa.Annotations[petriv1.AnnotationEnvironment])
		// Its deploy Job ran as it.
		var list batchv1.JobList
		require.NoError(t, env.Client.List(ctx, &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironmentUID: string(e.UID), contract.LabelAction: contract.ActionDeploy}))
		require.NotEmpty(t, list.Items)
		for _, j := range list.Items {
			assert.Equal(t, sa.Name, j.Spec.Template.Spec.ServiceAccountName)
		}
		return sa
	}
	a, b := identity(dotted), identity(dashed)
	require.NotEqual(t, a.Name, b.Name, "two environments, two identities")

	require.NoError(t, env.Client.Delete(ctx, dotted))
	waitGone(t, dotted)
	still := identity(dashed)
	assert.Equal(t, b.UID, still.UID, "the other environment's identity is untouched")
}

// A ServiceAccount that bears the deployer identity's name but is not the
// environment's is never adopted: the environment stalls and says why,
// nothing runs as that ServiceAccount, and the environment proceeds once it
// is gone.
func TestForeignDeployerServiceAccountIsNeverAdopted(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "sa-squat", succeedAll)
	ctx := context.Background()
	foreign := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: mgmtNS, Name: naming.DeployerServiceAccount("sa-squat"),
		Labels: map[string]string{"owner": "someone-else"},
	}}
	require.NoError(t, env.Client.Create(ctx, foreign))
	require.NoError(t, env.Client.Create(ctx, newEnv("sa-squat", greeter("app"))))
	stalled := func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonDeployerIdentityNotOwned)
	}
	e := waitFor(t, "sa-squat", "stalled (or wrongly ready)", func(e *petriv1.EphemeralEnvironment) bool { return stalled(e) || ready(e) })
	require.True(t, stalled(e), "a foreign ServiceAccount stalls the environment: %s", describe(e))
	msg := findCondition(e, petriv1.ConditionStalled).Message
	assert.Contains(t, msg, mgmtNS+"/"+foreign.Name)
	assert.Contains(t, msg, "not this environment's")
	assert.Equal(t, petriv1.EnvironmentStalled, e.Status.Phase)

	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), foreign))
	assert.Empty(t, foreign.OwnerReferences, "not adopted")
	assert.Equal(t, map[string]string{"owner": "someone-else"}, foreign.Labels, "not relabelled")
	var list batchv1.JobList
	require.NoError(t, env.Client.List(ctx, &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironmentUID: string(e.UID)}))
	assert.Empty(t, list.Items, "nothing ran as the foreign ServiceAccount")
	var events corev1.EventList
	require.NoError(t, env.Client.List(ctx, &events, client.InNamespace(mgmtNS)))
	warned := false
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == e.UID && ev.Reason == petriv1.ReasonDeployerIdentityNotOwned && ev.Type == corev1.EventTypeWarning {
			warned = true
		}
	}
	assert.True(t, warned, "a Warning event names the problem")

	// Once the foreign ServiceAccount is gone, the environment makes its own.
	require.NoError(t, env.Client.Delete(ctx, foreign))
	e = waitFor(t, "sa-squat", "ready", ready)
	sa := &corev1.ServiceAccount{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), sa))
	assert.True(t, metav1.IsControlledBy(sa, e))
}
