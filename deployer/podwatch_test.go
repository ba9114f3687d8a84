package deployer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
)

// This control plane has no scheduler and no kubelet: a release's pods stay
// Pending, unbound, with no status. The tests below play the scheduler and
// the kubelet through the API server (a binding, the status subresource)
// with the statuses they write, which is all the diagnosis reads; the
// cluster's own Deployment and ReplicaSet controllers make the pods.

// deployAsync runs a deploy that waits, and returns its outcome on a
// channel.
func deployAsync(t *testing.T, d *deployer.Deployer, req deployer.DeployRequest) <-chan error {
	t.Helper()
	req.Wait = true
	out := make(chan error, 1)
	go func() {
		_, err := d.Deploy(testContext(t), req)
		out <- err
	}()
	return out
}

// awaitFailure is the deploy's error, failing the test when it succeeded
// or did not end within limit.
func awaitFailure(t *testing.T, deploy <-chan error, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-deploy:
		require.Error(t, err, "the deploy failed")
		return err
	case <-time.After(limit):
		require.FailNow(t, "the deploy did not end in time", "limit %s", limit)
	}
	return nil
}

// newPod waits until the namespace has a pod no scheduler has bound yet
// (the one the latest revision made) and binds it to a node, as the
// scheduler would.
func newPod(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var pod *corev1.Pod
	require.Eventually(t, func() bool {
		list, err := env.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for i := range list.Items {
			if list.Items[i].Spec.NodeName == "" && list.Items[i].DeletionTimestamp == nil {
				pod = &list.Items[i]
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the Deployment made a pod")
	require.NoError(t, env.Clientset.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
	}, metav1.CreateOptions{}))
	return pod
}

// writeStatus writes the pod's status as a kubelet would: scheduled, not
// ready, with one container app in the given state.
func writeStatus(t *testing.T, pod *corev1.Pod, cs corev1.ContainerStatus) {
	t.Helper()
	ctx := context.Background()
	cur, err := env.Clientset.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	cs.Name, cs.Image = "app", cur.Spec.Containers[0].Image
	cur.Status.Phase = corev1.PodPending
	if cs.State.Running != nil {
		cur.Status.Phase = corev1.PodRunning
	}
	cur.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [app]"},
	}
	cur.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	_, err = env.Clientset.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func TestDeployFailsAtOnceOnImagePull(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	d := newDeployer(t, ns)
	start := time.Now()
	deploy := deployAsync(t, d, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("hi", "nope"), Timeout: 5 * time.Minute})
	pod := newPod(t, ns)
	pullErr := `failed to pull and unpack image "petri.dev/example-app:nope": failed to resolve reference "petri.dev/example-app:nope": not found`
	writeStatus(t, pod, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: pullErr}}})

	err := awaitFailure(t, deploy, time.Minute)
	assert.Less(t, time.Since(start), time.Minute, "failed long before release.timeout")
	assert.Equal(t, contract.ReasonImagePullFailed, deployer.Classify(err), err.Error())
	assert.True(t, deployer.Classify(err).Final(), "no other pod of the Job pulls it either")
	assert.Equal(t, `ImagePullFailed: install web: pod `+pod.Name+` container app image "petri.dev/example-app:nope" cannot be pulled: ErrImagePull: `+pullErr,
		deployer.TerminationMessage(err))
	last, err := actionConfig(t, ns).Releases.Last("web")
	require.NoError(t, err)
	assert.Equal(t, release.StatusFailed, last.Info.Status)
	assert.Contains(t, last.Info.Description, "cannot be pulled", "Helm recorded why")
}

func TestDeployFailsAtOnceOnCrashLoop(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	d := newDeployer(t, ns)
	start := time.Now()
	deploy := deployAsync(t, d, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("hi", "v1"), Timeout: 5 * time.Minute})
	pod := newPod(t, ns)
	crashed := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	// One crash is given time: the container may be waiting for something
	// that comes up.
	writeStatus(t, pod, corev1.ContainerStatus{RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: crashed},
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container=app"}}})
	select {
	case err := <-deploy:
		require.FailNow(t, "the deploy gave up after one crash", "%v", err)
	case <-time.After(3 * time.Second):
	}
	writeStatus(t, pod, corev1.ContainerStatus{RestartCount: contract.CrashRestarts, LastTerminationState: corev1.ContainerState{Terminated: crashed},
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container=app"}}})

	err := awaitFailure(t, deploy, time.Minute)
	assert.Less(t, time.Since(start), time.Minute, "failed long before release.timeout")
	assert.Equal(t, contract.ReasonContainerCrashed, deployer.Classify(err), err.Error())
	assert.True(t, deployer.Classify(err).Final())
	// No kubelet serves this pod's log here; the local node's tests read
	// one (controllers: TestCrashingComponentFailsWithItsLastLogLine).
	assert.Contains(t, deployer.TerminationMessage(err),
		"ContainerCrashed: install web: pod "+pod.Name+" container app crashed (restarted 3 times, exit code 1, Error); no log line read (")
}

func TestDeployWaitNamesUnschedulablePod(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	d := newDeployer(t, ns)
	start := time.Now()
	deploy := deployAsync(t, d, deployer.DeployRequest{Release: "web", Chart: localChart(t, "example-app"),
		Values: map[string]any{"nodeSelector": map[string]any{"petri.dev/pool": "none"}}, Timeout: 4 * time.Second})
	var pod *corev1.Pod
	require.Eventually(t, func() bool {
		list, err := env.Clientset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		pod = &list.Items[0]
		return true
	}, 30*time.Second, 50*time.Millisecond)
	msg := "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg}}
	_, err := env.Clientset.CoreV1().Pods(ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)

	err = awaitFailure(t, deploy, time.Minute)
	assert.GreaterOrEqual(t, time.Since(start), 4*time.Second, "a cluster may add nodes: the wait goes on until release.timeout")
	assert.Equal(t, contract.ReasonUnschedulable, deployer.Classify(err), err.Error())
	assert.True(t, deployer.Classify(err).Retryable(), "it may pass once the cluster has room")
	assert.Equal(t, "Unschedulable: install web: release.timeout 4s elapsed; pod "+pod.Name+" cannot be scheduled: "+msg, deployer.TerminationMessage(err))
}

func TestDeployWaitNamesFailingReadinessProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	d := newDeployer(t, ns)
	deploy := deployAsync(t, d, deployer.DeployRequest{Release: "web", Chart: localChart(t, "example-app"), Timeout: 4 * time.Second})
	pod := newPod(t, ns)
	writeStatus(t, pod, corev1.ContainerStatus{Started: new(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	now := metav1.Now()
	_, err := env.Clientset.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID, FieldPath: "spec.containers{app}"},
		Reason:         "Unhealthy", Type: corev1.EventTypeWarning, Message: "Readiness probe failed: HTTP probe failed with statuscode: 503",
		FirstTimestamp: now, LastTimestamp: now, Count: 7, Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	err = awaitFailure(t, deploy, time.Minute)
	assert.Equal(t, contract.ReasonTimeout, deployer.Classify(err), err.Error())
	assert.Equal(t, "Timeout: install web: release.timeout 4s elapsed; pod "+pod.Name+" container app not ready: readiness probe failing: Readiness probe failed: HTTP probe failed with statuscode: 503",
		deployer.TerminationMessage(err))
}

// A push that fixes a broken image: the old revision's pod, pulling in
// vain, is still there when the deploy starts waiting (terminating, since
// no kubelet confirms its end). Only the pods of the Deployment's latest
// ReplicaSet are the deploy's to judge: it does not give up for the old
// one.
func TestDeployWaitJudgesOnlyTheLatestRevision(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	d := newDeployer(t, ns)
	ch := localChart(t, "greeter")
	_, err := d.Deploy(testContext(t), deployer.DeployRequest{Release: "web", Chart: ch, Values: greeterValues("hi", "broken")})
	require.NoError(t, err)
	old := newPod(t, ns)
	writeStatus(t, old, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "petri.dev/example-app:broken"`}}})

	start := time.Now()
	deploy := deployAsync(t, d, deployer.DeployRequest{Release: "web", Chart: ch, Values: greeterValues("hi", "fixed"), Timeout: 5 * time.Second})
	err = awaitFailure(t, deploy, time.Minute)
	assert.GreaterOrEqual(t, time.Since(start), 5*time.Second, "not given up for the old pod")
	assert.Equal(t, contract.ReasonTimeout, deployer.Classify(err), err.Error())
	msg := deployer.TerminationMessage(err)
	assert.Contains(t, msg, "Timeout: upgrade web: release.timeout 5s elapsed; pod web-greeter-")
	assert.NotContains(t, msg, old.Name, "the old revision's pod is not the deploy's")
	assert.NotContains(t, msg, "broken")
}

// The namespace's Pod Security level refuses the release's pods: the
// Deployment's controller keeps getting the refusal, and no wait changes
// it.
func TestDeployFailsAtOnceWhenPodSecurityRefusesThePods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	nsObj, err := env.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "baseline"
	_, err = env.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{})
	require.NoError(t, err)
	ch := inlineChart("priv", "", map[string]string{"deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: priv}
  template:
    metadata:
      labels: {app: priv}
    spec:
      containers:
        - name: app
          image: petri.dev/example-app:v1
          securityContext:
            privileged: true
`})
	start := time.Now()
	err = awaitFailure(t, deployAsync(t, newDeployer(t, ns), deployer.DeployRequest{Release: "web", Chart: ch, Timeout: 5 * time.Minute}), time.Minute)
	assert.Less(t, time.Since(start), time.Minute, "failed long before release.timeout")
	assert.Equal(t, contract.ReasonKubernetesRefused, deployer.Classify(err), err.Error())
	msg := deployer.TerminationMessage(err)
	assert.Contains(t, msg, "KubernetesRefused: install web: Deployment web cannot create its pods: ")
	assert.Contains(t, msg, `violates PodSecurity "baseline:latest": privileged`)
}
