package node

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func statusWrites(c *fake.Clientset) (writes, reads int) {
	for _, a := range c.Actions() {
		switch {
		case a.GetVerb() == "update" && a.GetSubresource() == "status":
			writes++
		case a.GetVerb() == "get":
			reads++
		}
	}
	return writes, reads
}

func testPod(policy corev1.RestartPolicy, probe bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID("uid-1"), ResourceVersion: "5"},
		Spec:       corev1.PodSpec{RestartPolicy: policy, NodeName: "local", Containers: []corev1.Container{{Name: "main", Image: "x"}}},
	}
	if probe {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{}
	}
	return p
}

func testNode(p *corev1.Pod) (*Node, *fake.Clientset) {
	c := fake.NewClientset(p)
	n := &Node{opts: Options{Name: "local"}, client: c, running: map[types.UID]*podRun{p.UID: {}}, done: map[types.UID]bool{}, latest: map[types.UID]*corev1.Pod{}}
	return n, c
}

func running(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }

// A pod that runs to completion and finishes before its Running status is
// due is reported once, with its final status; one that is still running
// is reported Running; one that probes readiness or restarts containers is
// reported Running at once, since it writes status while it runs.
func TestRunningIsReportedOnlyForPodsStillRunning(t *testing.T) {
	ctx := context.Background()

	p := testPod(corev1.RestartPolicyNever, false)
	n, c := testNode(p)
	finished := make(chan struct{})
	close(finished)
	<-n.reportRunning(ctx, p, finished, running)
	writes, _ := statusWrites(c)
	assert.Zero(t, writes, "a pod finished before its Running status was due")

	p = testPod(corev1.RestartPolicyNever, false)
	n, c = testNode(p)
	<-n.reportRunning(ctx, p, make(chan struct{}), running)
	writes, _ = statusWrites(c)
	assert.Equal(t, 1, writes, "a pod still running after the delay")
	got, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodRunning, got.Status.Phase)

	for _, p := range []*corev1.Pod{testPod(corev1.RestartPolicyNever, true), testPod(corev1.RestartPolicyOnFailure, false), testPod(corev1.RestartPolicyAlways, false)} {
		n, c := testNode(p)
		finished := make(chan struct{})
		close(finished)
		<-n.reportRunning(ctx, p, finished, running)
		writes, _ := statusWrites(c)
		assert.Equal(t, 1, writes, "restart policy %s, readiness probe %v", p.Spec.RestartPolicy, p.Spec.Containers[0].ReadinessProbe != nil)
	}
}

// A status write starts from the newest copy of the pod the node has seen
// (its own last write, or the watch's) without reading it first; a conflict
// (someone wrote since) reads it again and retries.
func TestStatusWritesStartFromTheNewestKnownCopy(t *testing.T) {
	ctx := context.Background()
	p := testPod(corev1.RestartPolicyNever, false)
	n, c := testNode(p)
	n.remember(p)
	n.updateStatus(ctx, p, running)
	writes, reads := statusWrites(c)
	assert.Equal(t, 1, writes)
	assert.Zero(t, reads, "the known copy was used")

	// The next write starts from the copy the last write returned.
	c.ClearActions()
	n.updateStatus(ctx, p, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
	writes, reads = statusWrites(c)
	assert.Equal(t, 1, writes)
	assert.Zero(t, reads)

	// A stale copy: the API server refuses it, the pod is read again.
	c.ClearActions()
	conflicts := 0
	c.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "p", nil)
		}
		return false, nil, nil
	})
	n.latest[p.UID] = p.DeepCopy() // older than what the API server has
	n.updateStatus(ctx, p, func(p *corev1.Pod) { p.Status.Message = "again" })
	writes, reads = statusWrites(c)
	assert.Equal(t, 1, conflicts)
	assert.Equal(t, 1, reads, "read again after the conflict")
	assert.Equal(t, 2, writes)
	got, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "again", got.Status.Message)
}
