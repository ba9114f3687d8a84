package node_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Logs are read through the API server (pods/log), as kubectl logs reads
// them in a cluster: whole, the last lines, and followed until the
// container exits.
func TestPodLogsThroughTheAPIServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, job(ns, "done", "succeed")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "done")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	pod := jobPods(ns, "done")[0]
	pods := env.Clientset.CoreV1().Pods(ns)

	all, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Equal(t, "succeeded as pod "+pod.Name+"\n", string(all))
	none, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](0)}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Empty(t, string(none))
	cut, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{LimitBytes: ptr.To[int64](9)}).DoRaw(ctx)
	require.NoError(t, err)
	assert.Equal(t, "succeeded", string(cut))

	// Followed: the stream shows output while the container runs and ends
	// when it exits.
	release := filepath.Join(t.TempDir(), "release")
	require.NoError(t, env.Client.Create(ctx, job(ns, "waits", "wait-file", release)))
	var running string
	require.Eventually(t, func() bool {
		p := jobPods(ns, "waits")
		if len(p) == 1 && p[0].Status.Phase == corev1.PodRunning {
			running = p[0].Name
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	stream, err := pods.GetLogs(running, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	require.NoError(t, err)
	defer stream.Close()
	lines := bufio.NewScanner(stream)
	require.True(t, lines.Scan(), "a first line while the container runs: %v", lines.Err())
	assert.Equal(t, "waiting for "+release, lines.Text())
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	done := make(chan []string, 1)
	go func() {
		var rest []string
		for lines.Scan() {
			rest = append(rest, lines.Text())
		}
		done <- rest
	}()
	select {
	case rest := <-done:
		assert.Empty(t, strings.Join(rest, "\n"), "nothing more was written")
	case <-time.After(30 * time.Second):
		t.Fatal("the followed log did not end when the container exited")
	}

	_, err = pods.GetLogs("no-such-pod", &corev1.PodLogOptions{}).DoRaw(ctx)
	assert.Error(t, err)
}
