package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPodsWaitForRoomOnTheNode: the node reports its allocatable CPU and
// runs pods only while their requests fit in it, as the scheduler places
// them: a second pod that does not fit beside the first waits unbound until
// the first is gone, a pod deleted while it waits gives its place up, and a
// pod asking for more than the whole node is Unschedulable.
func TestPodsWaitForRoomOnTheNode(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	var n corev1.Node
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Name: env.Node.Name()}, &n) == nil && n.Status.Allocatable.Cpu().MilliValue() > 0
	}, 30*time.Second, 20*time.Millisecond, "the Node object reports its allocatable CPU")
	cpu := n.Status.Allocatable.Cpu().MilliValue()
	assert.Equal(t, n.Status.Allocatable.Cpu().String(), n.Status.Capacity.Cpu().String())

	// More than half the node: two never fit together.
	half := resource.NewMilliQuantity(cpu/2+1, resource.DecimalSI)
	pod := func(name string, request *resource.Quantity, args ...string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "main", Image: helperImage + ":v1", Command: []string{"/petri-testhelper"}, Args: args,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *request}},
				}},
			},
		}
	}
	get := func(name string) corev1.Pod {
		var p corev1.Pod
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p))
		return p
	}
	require.NoError(t, env.Client.Create(ctx, pod("first", half, "block")))
	require.Eventually(t, func() bool { return get("first").Status.Phase == corev1.PodRunning }, 30*time.Second, 50*time.Millisecond)

	require.NoError(t, env.Client.Create(ctx, pod("gives-up", half, "succeed")))
	require.Eventually(t, func() bool { return env.Node.Waiting() == 1 }, 30*time.Second, 20*time.Millisecond)
	assert.Empty(t, get("gives-up").Spec.NodeName, "a pod that does not fit is not bound")
	require.NoError(t, env.Client.Delete(ctx, pod("gives-up", half)))
	require.Eventually(t, func() bool { return env.Node.Waiting() == 0 }, 30*time.Second, 20*time.Millisecond)

	require.NoError(t, env.Client.Create(ctx, pod("second", half, "succeed")))
	require.Eventually(t, func() bool { return env.Node.Waiting() == 1 }, 30*time.Second, 20*time.Millisecond)
	assert.Empty(t, get("second").Spec.NodeName, "a pod that does not fit is not bound")
	assert.Equal(t, corev1.PodPending, get("second").Status.Phase)

	// A pod that fits beside the first passes the waiting one.
	small := resource.NewMilliQuantity(cpu/2-1, resource.DecimalSI)
	require.NoError(t, env.Client.Create(ctx, pod("small", small, "succeed")))
	require.Eventually(t, func() bool { return get("small").Status.Phase == corev1.PodSucceeded }, 30*time.Second, 50*time.Millisecond)
	assert.Empty(t, get("second").Spec.NodeName, "still waiting for the first")

	require.NoError(t, env.Client.Delete(ctx, pod("first", half), client.GracePeriodSeconds(0)))
	require.Eventually(t, func() bool { return get("second").Status.Phase == corev1.PodSucceeded }, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, env.Node.Name(), get("second").Spec.NodeName)
	assert.Zero(t, env.Node.Waiting())

	too := resource.NewMilliQuantity(cpu+1, resource.DecimalSI)
	require.NoError(t, env.Client.Create(ctx, pod("too-big", too, "succeed")))
	require.Eventually(t, func() bool {
		for _, c := range get("too-big").Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				assert.Contains(t, c.Message, "Insufficient cpu")
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	assert.Empty(t, get("too-big").Spec.NodeName)
	assert.Zero(t, env.Node.Waiting(), "a pod that can never fit does not wait")
}
