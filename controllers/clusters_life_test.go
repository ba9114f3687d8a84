package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// An environment placed in a workload cluster lives there whole: its
// namespace, RoleBinding, deployer identity, values Secrets and Jobs are in
// that cluster, as the API servers answer, none in the management cluster;
// status.cluster is committed with the namespace's name; teardown leaves
// nothing of it in either cluster.
func TestPlacedEnvironmentLivesInItsWorkloadCluster(t *testing.T) {
	t.Parallel()
	wl := workloadCluster(t)
	register(t, "east", wl.Config.Host, 10, map[string]string{"region": "east"})
	ctx := context.Background()
	e := placedIn("east", greeter("db"), greeter("web", "db"))("placed")
	require.NoError(t, env.Client.Create(ctx, e))
	e = waitFor(t, "placed", "Ready in east", ready)
	assert.Equal(t, "east", e.Status.Cluster)
	assert.True(t, conditionIs(e, petriv1.ConditionClusterPlaced, metav1.ConditionTrue, petriv1.ReasonClusterPlaced))
	ns := e.Status.TargetNamespace

	var remote corev1.Namespace
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Name: ns}, &remote), "the namespace is in the workload cluster")
	assert.Equal(t, mgmtNS+"/placed", remote.Annotations[petriv1.AnnotationEnvironment])
	err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "and not in the management cluster: %v", err)

	var rb rbacv1.RoleBinding
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "petri-deployer"}, &rb))
	assert.Equal(t, "admin", rb.RoleRef.Name)
	var sa corev1.ServiceAccount
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: naming.DeployerServiceAccount("placed")}, &sa))
	assert.Empty(t, sa.OwnerReferences, "no owner reference can point across clusters")
	assert.Equal(t, string(e.UID), sa.Labels[petriv1.LabelEnvironmentUID])

	jobs := remoteJobs(t, wl, e)
	require.Len(t, jobs, 2, "a deploy Job per component, in the workload cluster")
	for _, j := range jobs {
		assert.Empty(t, j.OwnerReferences, j.Name)
		assert.Equal(t, naming.DeployerServiceAccount("placed"), j.Spec.Template.Spec.ServiceAccountName)
	}
	var mgmtJobs batchv1.JobList
	require.NoError(t, env.Client.List(ctx, &mgmtJobs, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironmentUID: string(e.UID)}))
	assert.Empty(t, mgmtJobs.Items, "no Job of the environment in the management cluster")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: naming.DeployerServiceAccount("placed")}, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "nor its identity: %v", err)

	// The cluster counts it.
	waitCluster(t, "east", "counts one environment", func(wc *petriv1.WorkloadCluster) bool { return wc.Status.Environments == 1 })

	// The committed cluster is never reconsidered: a new placement changes
	// nothing.
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), e))
	e.Spec.Placement = &petriv1.Placement{Cluster: "elsewhere"}
	require.NoError(t, env.Client.Update(ctx, e))
	e = waitFor(t, "placed", "Ready at the new generation, still in east", ready)
	assert.Equal(t, "east", e.Status.Cluster)
	assert.Equal(t, ns, e.Status.TargetNamespace)

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	ok := eventually(90*time.Second, func() bool {
		err := wl.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
		return apierrors.IsNotFound(err)
	})
	assert.True(t, ok, "the namespace is gone from the workload cluster")
	assert.Empty(t, remoteJobs(t, wl, e), "the Jobs are deleted there by the operator")
	var secrets corev1.SecretList
	require.NoError(t, wl.Client.List(ctx, &secrets, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironmentUID: string(e.UID)}))
	assert.Empty(t, secrets.Items, "and the values Secrets")
	err = wl.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: naming.DeployerServiceAccount("placed")}, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "and the identity: %v", err)
}

// A cluster at its cap queues new environments (ClusterPlaced False,
// ClusterAtCapacity); one leaving makes room for the next.
func TestClusterAtCapacityQueues(t *testing.T) {
	t.Parallel()
	wl := workloadCluster(t)
	register(t, "tiny", wl.Config.Host, 1, map[string]string{"size": "tiny"})
	ctx := context.Background()
	sel := &petriv1.Placement{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"size": "tiny"}}}
	first, second := newEnv("cap-first", greeter("app")), newEnv("cap-second", greeter("app"))
	first.Spec.Placement, second.Spec.Placement = sel, sel.DeepCopy()
	require.NoError(t, env.Client.Create(ctx, first))
	waitFor(t, "cap-first", "Ready in tiny", ready)
	require.NoError(t, env.Client.Create(ctx, second))
	e := waitFor(t, "cap-second", "queued", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionClusterPlaced, metav1.ConditionFalse, petriv1.ReasonClusterAtCapacity)
	})
	assert.Empty(t, e.Status.Cluster)
	assert.Empty(t, e.Status.TargetNamespace, "nothing is chosen or created while it waits")
	assert.Contains(t, conditionMessage(e, petriv1.ConditionReady), "tiny (1 of 1 environments)")

	require.NoError(t, env.Client.Delete(ctx, first))
	waitGone(t, first)
	e = waitFor(t, "cap-second", "placed once there is room", ready)
	assert.Equal(t, "tiny", e.Status.Cluster)
	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
}

// A workload cluster that stops answering: its environments say so, naming
// it, and nothing is deleted for it; an environment of another cluster goes
// on; its teardown waits, visibly, and the force-delete annotation ends it
// without touching that cluster.
func TestUnreachableClusterWaitsAndForceDeleteEndsIt(t *testing.T) {
	t.Parallel()
	wl := workloadCluster(t)
	p := newProxy(t, backendOf(t, wl))
	register(t, "flaky", p.url(), 10, nil)
	register(t, "steady", wl.Config.Host, 10, nil)
	ctx := context.Background()
	lost := placedIn("flaky", greeter("app"))("lost")
	kept := placedIn("steady", greeter("app"))("kept")
	require.NoError(t, env.Client.Create(ctx, lost))
	require.NoError(t, env.Client.Create(ctx, kept))
	lost = waitFor(t, "lost", "Ready in flaky", ready)
	waitFor(t, "kept", "Ready in steady", ready)

	p.setCut(true)
	waitCluster(t, "flaky", "unreachable", func(wc *petriv1.WorkloadCluster) bool {
		return conditionFalse(wc.Status.Conditions, petriv1.ConditionReachable)
	})
	e := waitFor(t, "lost", "not Ready, naming the cluster", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable)
	})
	assert.Contains(t, conditionMessage(e, petriv1.ConditionReady), "workload cluster flaky does not answer")
	k := get(t, "kept")
	assert.True(t, ready(k), "the other cluster's environment stays Ready: %s", describe(k))

	require.NoError(t, env.Client.Delete(ctx, e))
	e = waitFor(t, "lost", "teardown waiting for its cluster", func(e *petriv1.EphemeralEnvironment) bool {
		return !e.DeletionTimestamp.IsZero() && conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonClusterUnreachable)
	})
	assert.Contains(t, conditionMessage(e, petriv1.ConditionStalled), petriv1.AnnotationForceDelete)
	var ns corev1.Namespace
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Name: lost.Status.TargetNamespace}, &ns), "nothing is deleted in a cluster that does not answer")
	assert.True(t, ns.DeletionTimestamp.IsZero())

	patch := client.MergeFrom(e.DeepCopy())
	if e.Annotations == nil {
		e.Annotations = map[string]string{}
	}
	e.Annotations[petriv1.AnnotationForceDelete] = "true"
	require.NoError(t, env.Client.Patch(ctx, e, patch))
	waitGone(t, e)
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Name: lost.Status.TargetNamespace}, &ns), "force delete leaves the unreachable cluster's namespace")
	assert.True(t, ns.DeletionTimestamp.IsZero())
	require.NoError(t, wl.Client.Delete(ctx, &ns))

	p.setCut(false)
	require.NoError(t, env.Client.Delete(ctx, k))
	waitGone(t, k)
}

func conditionMessage(e *petriv1.EphemeralEnvironment, typ string) string {
	for _, c := range e.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

func conditionFalse(cs []metav1.Condition, typ string) bool {
	for _, c := range cs {
		if c.Type == typ {
			return c.Status == metav1.ConditionFalse && !strings.EqualFold(c.Reason, "")
		}
	}
	return false
}

// An operator that restarts says nothing of a workload cluster before it
// has heard from it: an environment Ready there stays Ready (no
// ClusterUnreachable, no Warning), and one created meanwhile is placed as
// soon as the new operator's first probe answers.
func restartKeepsPlacedEnvironmentsReady(t *testing.T) {
	wl := workloadCluster(t)
	register(t, "steadfast", wl.Config.Host, 10, nil)
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, placedIn("steadfast", greeter("app"))("stays")))
	before := waitFor(t, "stays", "Ready in steadfast", ready)
	readySince := apimeta.FindStatusCondition(before.Status.Conditions, petriv1.ConditionReady).LastTransitionTime

	restartOperator(t)
	require.NoError(t, env.Client.Create(ctx, placedIn("steadfast", greeter("app"))("after-restart")))
	waitFor(t, "after-restart", "placed and Ready after the restart", ready)

	e := get(t, "stays")
	assert.True(t, ready(e), "still Ready: %s", describe(e))
	c := apimeta.FindStatusCondition(e.Status.Conditions, petriv1.ConditionReady)
	assert.Equal(t, readySince, c.LastTransitionTime, "Ready never went False across the restart")
	var events corev1.EventList
	require.NoError(t, env.Client.List(ctx, &events, client.InNamespace(mgmtNS)))
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == e.UID && ev.Reason == petriv1.ReasonClusterUnreachable {
			t.Errorf("event %s %s: %s", ev.Type, ev.Reason, ev.Message)
		}
	}
	for _, name := range []string{"stays", "after-restart"} {
		x := get(t, name)
		require.NoError(t, env.Client.Delete(ctx, x))
		waitGone(t, x)
	}
}
