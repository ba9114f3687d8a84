package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestJobRunsToCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, job(ns, "ok", "succeed")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "ok")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)

	pods := jobPods(ns, "ok")
	require.Len(t, pods, 1)
	pod := pods[0]
	assert.Equal(t, corev1.PodSucceeded, pod.Status.Phase)
	assert.Equal(t, env.Node.Name(), pod.Spec.NodeName, "the pod is bound to the local node")
	require.Len(t, pod.Status.ContainerStatuses, 1)
	require.NotNil(t, pod.Status.ContainerStatuses[0].State.Terminated)
	assert.Equal(t, int32(0), pod.Status.ContainerStatuses[0].State.Terminated.ExitCode)
	logs, err := os.ReadFile(env.Node.LogPath(ns, pod.Name, "main"))
	require.NoError(t, err)
	assert.Contains(t, string(logs), "succeeded as pod "+pod.Name, "the container's output is kept and HOSTNAME is the pod name")
}

func TestFailingJobReportsExitCodeAndMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, job(ns, "bad", "fail", "--termination-log=/dev/termination-log", "7", "chart not found: oci://nowhere/x")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "bad")() == batchv1.JobFailed }, 30*time.Second, 50*time.Millisecond)

	pods := jobPods(ns, "bad")
	require.Len(t, pods, 1, "backoffLimit 0: one pod, never run twice")
	term := pods[0].Status.ContainerStatuses[0].State.Terminated
	require.NotNil(t, term)
	assert.Equal(t, corev1.PodFailed, pods[0].Status.Phase)
	assert.Equal(t, int32(7), term.ExitCode)
	assert.Equal(t, "chart not found: oci://nowhere/x", term.Message)
}

func TestTwentyJobsRunConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	release := filepath.Join(scratch, ns+"-release")
	const n = 20
	for i := range n {
		require.NoError(t, env.Client.Create(ctx, job(ns, fmt.Sprintf("j%02d", i), "wait-file", release)))
	}
	// All twenty are running at the same moment: none can finish before the
	// file appears.
	require.Eventually(t, func() bool {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n
	}, 60*time.Second, 100*time.Millisecond)
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	for i := range n {
		name := fmt.Sprintf("j%02d", i)
		require.Eventually(t, func() bool { return jobCondition(ctx, ns, name)() == batchv1.JobComplete }, 60*time.Second, 100*time.Millisecond)
		assert.Len(t, jobPods(ns, name), 1, "job %s ran exactly one pod", name)
	}
}

// A container of a pod with restartPolicy Always is started again after it
// exits, with the restart counted and its exit kept as the last state.
func TestRestartPolicyAlwaysRestartsTheContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crasher"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
			Name: "main", Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"fail", "--termination-log=/dev/termination-log", "3", "crashed"},
		}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	require.Eventually(t, func() bool {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || len(pod.Status.ContainerStatuses) == 0 {
			return false
		}
		return pod.Status.ContainerStatuses[0].RestartCount >= 2
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
	last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated
	require.NotNil(t, last)
	assert.Equal(t, int32(3), last.ExitCode)
	assert.Equal(t, "crashed", last.Message)
	require.NoError(t, env.Client.Delete(ctx, pod))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
	}, 30*time.Second, 50*time.Millisecond, "a deleted pod is stopped and removed")
}

// A pod whose image the node does not know is never claimed: it stays
// Pending and unbound, as on a cluster without a node that can run it.
func TestUnknownImageStaysPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	unknown := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres:16"}}},
	}
	require.NoError(t, env.Client.Create(ctx, unknown))
	// A known pod created after it runs to completion, so the node has seen
	// both.
	require.NoError(t, env.Client.Create(ctx, job(ns, "after", "succeed")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "after")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(unknown), unknown))
	assert.Equal(t, corev1.PodPending, unknown.Status.Phase)
	assert.Empty(t, unknown.Spec.NodeName)
}

// A deleted pod is stopped the way the kubelet stops it: SIGTERM first, so
// that its process can finish what it is doing, and SIGKILL only for a
// process still running when the pod's grace period is over.
func TestDeletedPodGetsSIGTERMThenSIGKILLAfterItsGracePeriod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	pod := func(name, onTerm string, grace int64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{
				Name: "main", Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"on-sigterm", onTerm},
			}}},
		}
	}
	graceful, stubborn := pod("graceful", "exit", 30), pod("stubborn", "ignore", 2)
	logs := func(p *corev1.Pod) string {
		b, _ := os.ReadFile(env.Node.LogPath(ns, p.Name, "main"))
		return string(b)
	}
	for _, p := range []*corev1.Pod{graceful, stubborn} {
		require.NoError(t, env.Client.Create(ctx, p))
	}
	for _, p := range []*corev1.Pod{graceful, stubborn} {
		require.Eventually(t, func() bool { return strings.Contains(logs(p), "waiting for SIGTERM") }, 30*time.Second, 20*time.Millisecond)
	}
	gone := func(p *corev1.Pod) func() bool {
		return func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}))
		}
	}

	// The graceful process stops on SIGTERM, long before its 30 seconds.
	deleted := time.Now()
	require.NoError(t, env.Client.Delete(ctx, graceful))
	require.Eventually(t, gone(graceful), 20*time.Second, 20*time.Millisecond)
	assert.Contains(t, logs(graceful), "SIGTERM received: stopping")
	assert.Less(t, time.Since(deleted), 20*time.Second)

	// The stubborn one heard SIGTERM, went on, and was killed after its
	// 2 seconds; it was not started again under restartPolicy Always.
	deleted = time.Now()
	require.NoError(t, env.Client.Delete(ctx, stubborn))
	require.Eventually(t, gone(stubborn), 30*time.Second, 20*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(deleted), 2*time.Second, "killed before its grace period was over")
	assert.Contains(t, logs(stubborn), "SIGTERM received: ignored")
	assert.Equal(t, 1, strings.Count(logs(stubborn), "waiting for SIGTERM"), "started once")
}
