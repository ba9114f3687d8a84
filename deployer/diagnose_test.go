package deployer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
)

// scheduledPod is a pod bound to a node with one container app (a
// readiness probe when probe) whose status is cs.
func scheduledPod(probe bool, cs ...corev1.ContainerStatus) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-5d9c7-x2x4z"},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/web:v2"}}},
		Status: corev1.PodStatus{
			Phase:             corev1.PodPending,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}},
			ContainerStatuses: cs,
		},
	}
	if probe {
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}}
	}
	return pod
}

func waiting(reason, message string, restarts int32, last *corev1.ContainerStateTerminated) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: "app", Image: "registry.example.com/web:v2", RestartCount: restarts,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
		LastTerminationState: corev1.ContainerState{Terminated: last},
	}
}

func running(ready bool, restarts int32, last *corev1.ContainerStateTerminated) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: "app", Image: "registry.example.com/web:v2", Ready: ready, Started: ptr.To(true), RestartCount: restarts,
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: last},
	}
}

// The diagnosis reads a pod's status only; each row is a status a kubelet
// (or the scheduler) writes, and what the deploy's failure says of it.
func TestDiagnosePod(t *testing.T) {
	t.Parallel()
	exited := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	pullErr := `failed to pull and unpack image "registry.example.com/web:v2": not found`
	tests := []struct {
		name   string
		pod    *corev1.Pod
		reason contract.Reason
		now    bool
		want   string
	}{
		{
			name: "image not found", pod: scheduledPod(false, waiting("ErrImagePull", pullErr, 0, nil)),
			reason: contract.ReasonImagePullFailed, now: true,
			want: `pod web-5d9c7-x2x4z container app image "registry.example.com/web:v2" cannot be pulled: ErrImagePull: ` + pullErr,
		},
		{
			name: "image pull back-off", pod: scheduledPod(false, waiting("ImagePullBackOff", `Back-off pulling image "registry.example.com/web:v2"`, 0, nil)),
			reason: contract.ReasonImagePullFailed, now: true,
			want: `pod web-5d9c7-x2x4z container app image "registry.example.com/web:v2" cannot be pulled: ImagePullBackOff: Back-off pulling image "registry.example.com/web:v2"`,
		},
		{
			name: "invalid image name", pod: scheduledPod(false, waiting("InvalidImageName", `Failed to apply default image tag "Web:V2"`, 0, nil)),
			reason: contract.ReasonImagePullFailed, now: true,
			want: `pod web-5d9c7-x2x4z container app image "registry.example.com/web:v2" cannot be pulled: InvalidImageName: Failed to apply default image tag "Web:V2"`,
		},
		{
			name: "crash loop", pod: scheduledPod(false, waiting("CrashLoopBackOff", "back-off 40s restarting failed container=app", contract.CrashRestarts, exited)),
			reason: contract.ReasonContainerCrashed, now: true,
			want: "pod web-5d9c7-x2x4z container app crashed (restarted 3 times, exit code 1, Error)",
		},
		{
			name: "first crash", pod: scheduledPod(false, waiting("CrashLoopBackOff", "back-off 10s", 1, exited)),
			reason: contract.ReasonContainerCrashed,
			want:   "pod web-5d9c7-x2x4z container app crashed (restarted once, exit code 1, Error)",
		},
		{
			name: "running again after crashes", pod: scheduledPod(true, running(false, contract.CrashRestarts, exited)),
			reason: contract.ReasonContainerCrashed,
			want:   "pod web-5d9c7-x2x4z container app crashed (restarted 3 times, exit code 1, Error)",
		},
		{
			name: "readiness probe failing", pod: scheduledPod(true, running(false, 0, nil)),
			reason: contract.ReasonTimeout,
			want:   "pod web-5d9c7-x2x4z container app not ready: readiness probe failing",
		},
		{
			name: "config missing", pod: scheduledPod(false, waiting("CreateContainerConfigError", `secret "web-db" not found`, 0, nil)),
			reason: contract.ReasonTimeout,
			want:   `pod web-5d9c7-x2x4z container app waiting: CreateContainerConfigError: secret "web-db" not found`,
		},
		{
			name: "creating", pod: scheduledPod(false, waiting("ContainerCreating", "", 0, nil)),
			reason: contract.ReasonTimeout,
			want:   "pod web-5d9c7-x2x4z container app waiting: ContainerCreating",
		},
		{
			name: "unschedulable",
			pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-5d9c7-x2x4z"}, Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
			}}}},
			reason: contract.ReasonUnschedulable,
			want:   "pod web-5d9c7-x2x4z cannot be scheduled: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
		},
		{
			name:   "not scheduled yet",
			pod:    &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-5d9c7-x2x4z"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
			reason: contract.ReasonTimeout,
			want:   "pod web-5d9c7-x2x4z not scheduled yet",
		},
		{
			name:   "evicted",
			pod:    &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-5d9c7-x2x4z"}, Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}},
			reason: contract.ReasonTimeout,
			want:   "pod web-5d9c7-x2x4z failed: Evicted: The node was low on resource: memory.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := deployer.DiagnosePod(tt.pod)
			require.NotNil(t, p)
			assert.Equal(t, tt.reason, p.Reason)
			assert.Equal(t, tt.now, p.Now, "fails the deploy at once")
			assert.Equal(t, tt.want, p.String())
		})
	}
}

func TestDiagnosePodInitContainer(t *testing.T) {
	t.Parallel()
	pod := scheduledPod(false, waiting("PodInitializing", "", 0, nil))
	pod.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "registry.example.com/migrate:v2"}}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{waiting("CrashLoopBackOff", "", 4, &corev1.ContainerStateTerminated{ExitCode: 2})}
	pod.Status.InitContainerStatuses[0].Name = "migrate"
	p := deployer.DiagnosePod(pod)
	require.NotNil(t, p)
	assert.Equal(t, contract.ReasonContainerCrashed, p.Reason, "the init container explains more than the waiting app")
	assert.True(t, p.Now)
	assert.Equal(t, "pod web-5d9c7-x2x4z init container migrate crashed (restarted 4 times, exit code 2)", p.String())

	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "migrate", Ready: true, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{running(true, 0, nil)}
	pod.Status.Conditions[1].Status = corev1.ConditionTrue
	assert.Nil(t, deployer.DiagnosePod(pod), "a finished init container and a ready app")
}

// Pods with nothing to report: ready, finished, going away.
func TestDiagnosePodHealthy(t *testing.T) {
	t.Parallel()
	ready := scheduledPod(true, running(true, 1, &corev1.ContainerStateTerminated{ExitCode: 1}))
	ready.Status.Phase = corev1.PodRunning
	ready.Status.Conditions[1].Status = corev1.ConditionTrue
	assert.Nil(t, deployer.DiagnosePod(ready), "ready, though it crashed once before")

	done := scheduledPod(false)
	done.Status.Phase = corev1.PodSucceeded
	assert.Nil(t, deployer.DiagnosePod(done))

	leaving := scheduledPod(false, waiting("ImagePullBackOff", "", 0, nil))
	leaving.DeletionTimestamp = ptr.To(metav1.Now())
	assert.Nil(t, deployer.DiagnosePod(leaving), "a pod being deleted is on its way out")
}
