package node_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/node"
)

// A node that restarts while its pod runs never runs that pod again: it marks
// the pod failed and the Job controller makes a new pod.
func TestRestartedNodeNeverRunsAPodTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	const image = "petri.dev/testhelper-restart"
	newNode := func() (*node.Node, context.CancelFunc, chan error) {
		n, err := node.New(env.Config, node.Options{Name: "restart-node", Images: map[string]string{image: helper}, Dir: filepath.Join(scratch, ns)})
		require.NoError(t, err)
		nctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- n.Run(nctx) }()
		return n, cancel, done
	}
	node, stop, done := newNode()

	j := job(ns, "restart", "block")
	one := int32(1)
	j.Spec.BackoffLimit = &one
	j.Spec.Template.Spec.Containers[0].Image = image
	require.NoError(t, env.Client.Create(ctx, j))
	var first corev1.Pod
	require.Eventually(t, func() bool {
		pods := jobPods(ns, "restart")
		if len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning {
			first = pods[0]
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	// The process itself is up (Running is reported as it starts).
	require.Eventually(t, func() bool {
		logs, err := os.ReadFile(node.LogPath(ns, first.Name, "main"))
		return err == nil && strings.Contains(string(logs), "blocking until killed")
	}, 30*time.Second, 20*time.Millisecond)

	stop()
	require.NoError(t, <-done)
	node, stop, done = newNode()
	defer func() { stop(); <-done }()

	require.Eventually(t, func() bool {
		var p corev1.Pod
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(&first), &p)
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodeRestarted"
	}, 30*time.Second, 50*time.Millisecond)
	// The replacement pod runs on the new node; the first pod's log shows a
	// single start.
	require.Eventually(t, func() bool {
		for _, p := range jobPods(ns, "restart") {
			if p.UID != first.UID && p.Status.Phase == corev1.PodRunning {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	logs, err := os.ReadFile(node.LogPath(ns, first.Name, "main"))
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(logs), "blocking until killed"))
}

// Kill ends a running pod the way an out-of-memory kill does.
func TestKillFailsThePod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, job(ns, "victim", "block")))
	var pod corev1.Pod
	require.Eventually(t, func() bool {
		pods := jobPods(ns, "victim")
		if len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning {
			pod = pods[0]
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, env.Node.Kill(ns, pod.Name))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "victim")() == batchv1.JobFailed }, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(&pod), &pod))
	assert.Equal(t, int32(137), pod.Status.ContainerStatuses[0].State.Terminated.ExitCode)
}

// KillContainer kills a container's process the way SIGKILL on a node does:
// the pod stays, and under restartPolicy Always the container starts again
// with the kill (exit 137) as its last state.
func TestKillContainerRestartsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sigkilled"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{
			Name: "main", Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"block"},
		}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	running := func(restarts int32) func() bool {
		return func() bool {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || len(pod.Status.ContainerStatuses) == 0 {
				return false
			}
			cs := pod.Status.ContainerStatuses[0]
			return cs.RestartCount == restarts && cs.State.Running != nil
		}
	}
	require.Eventually(t, running(0), 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return env.Node.KillContainer(ctx, ns, pod.Name, "main") == nil }, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, running(1), 30*time.Second, 50*time.Millisecond, "the killed container runs again")
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
	last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated
	require.NotNil(t, last)
	assert.Equal(t, int32(137), last.ExitCode)
	assert.Error(t, env.Node.KillContainer(ctx, ns, pod.Name, "other"), "a container that does not run cannot be killed")
	require.NoError(t, env.Client.Delete(ctx, pod))
}

// A pod that finishes while the API server is down still reports it once
// the API server is back, as a kubelet keeps syncing pod status: its Job
// completes.
func TestPodStatusSurvivesAPIServerRestart(t *testing.T) {
	c, err := controlplane.Start(controlplane.Options{Images: map[string]string{helperImage: helper}})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx := context.Background()
	ns, err := c.CreateNamespace(ctx, "restart")
	require.NoError(t, err)
	done := filepath.Join(scratch, "restart-apiserver-done")
	j := job(ns, "outlives", "wait-file", done)
	require.NoError(t, c.Client.Create(ctx, j))
	require.Eventually(t, func() bool {
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 1 {
			return false
		}
		return pods.Items[0].Status.Phase == corev1.PodRunning
	}, 30*time.Second, 50*time.Millisecond)

	// The pod ends while the API server is down.
	restarted := make(chan error, 1)
	go func() { restarted <- c.RestartAPIServer(ctx, 3*time.Second) }()
	require.Eventually(t, func() bool {
		_, err := c.Clientset.Discovery().ServerVersion()
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "the API server goes down")
	require.NoError(t, os.WriteFile(done, nil, 0o644))
	require.NoError(t, <-restarted)

	require.Eventually(t, func() bool {
		var got batchv1.Job
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(j), &got); err != nil {
			return false
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "the pod's success reaches the API server after its restart")
}

// lostAnswers performs requests whose path ends in suffix and then, the
// first times, reports a broken connection instead of the answer: the API
// server acted, the client never heard, as when the API server is killed
// mid-request.
type lostAnswers struct {
	next   http.RoundTripper
	suffix string
	lose   atomic.Int32
}

func (l *lostAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, l.suffix) && l.lose.Add(-1) >= 0 {
		resp.Body.Close()
		return nil, fmt.Errorf("connection reset by peer (answer to %s lost by the test)", r.URL.Path)
	}
	return resp, err
}

// A pod whose binding the API server made but whose answer the node never
// got (the API server restarted mid-request) is still run: the node retries
// the binding, is told the pod is already bound, and finds it bound to
// itself. Before, it took that answer for another node's and left the pod
// Pending for good.
func TestPodBoundWithTheAnswerLostStillRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	const image = "petri.dev/testhelper-lostbind"
	lost := &lostAnswers{suffix: "/binding"}
	lost.lose.Store(1)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { lost.next = rt; return lost }
	n, err := node.New(cfg, node.Options{Name: "lostbind-node", Images: map[string]string{image: helper}, Dir: filepath.Join(scratch, ns)})
	require.NoError(t, err)
	nctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(nctx) }()
	t.Cleanup(func() { cancel(); <-done })

	j := job(ns, "lostbind", "succeed")
	j.Spec.Template.Spec.Containers[0].Image = image
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "lostbind")() == batchv1.JobComplete }, 60*time.Second, 50*time.Millisecond,
		"the Job completes on the node that bound its pod")
	assert.Equal(t, int32(-1), lost.lose.Load(), "one binding answer was lost")
}
