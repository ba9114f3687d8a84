package jobs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/api/contract"
)

func TestBuild(t *testing.T) {
	j := Build(Spec{
		Name: "env-api-deploy-g1-abcd", Namespace: "petri-system",
		Labels:         map[string]string{contract.LabelAction: contract.ActionDeploy},
		Owner:          metav1.OwnerReference{Name: "env", UID: "u", Controller: new(bool)},
		ServiceAccount: "petri-deployer-env", Image: "deployer:1",
		Command: []string{DeployerEntrypoint}, Args: []string{"deploy"},
		ValuesSecret: "values-secret", CASecret: "ca", InstanceSecret: "pg-instance",
		BackoffLimit: 2, ActiveDeadline: 10 * time.Minute, TTLAfterFinished: time.Hour,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
	})
	assert.Equal(t, int32(2), *j.Spec.BackoffLimit)
	assert.Equal(t, int64(600), *j.Spec.ActiveDeadlineSeconds)
	assert.Equal(t, int32(3600), *j.Spec.TTLSecondsAfterFinished)
	assert.Equal(t, batchv1.Failed, *j.Spec.PodReplacementPolicy, "a new pod only after the old one is gone")
	pod := j.Spec.Template.Spec
	assert.Equal(t, "petri-deployer-env", pod.ServiceAccountName)
	assert.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
	assert.Equal(t, j.Labels, j.Spec.Template.Labels)
	c := pod.Containers[0]
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, TerminationLogPath, c.TerminationMessagePath)
	assert.Equal(t, "100m", c.Resources.Requests.Cpu().String())
	assert.Equal(t, "1Gi", c.Resources.Limits.Memory().String())
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	assert.Equal(t, map[string]string{"tmp": TmpDir, "values": ValuesDir, "ca": CADir, "instance": InstanceDir}, mounts)
	secrets := map[string]string{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	assert.Equal(t, map[string]string{"values": "values-secret", "ca": "ca", "instance": "pg-instance"}, secrets)
	require.Len(t, j.OwnerReferences, 1)
}

// The deployer's final exit codes fail the Job at once; any other failure is
// retried under backoffLimit. controllers/kubeversion_test.go runs such Jobs.
func TestBuildFailsDeployerJobsOnFinalExitCodes(t *testing.T) {
	j := Build(Spec{Name: "x", Image: "deployer:1", Command: []string{DeployerEntrypoint}, Args: []string{"deploy"}, BackoffLimit: 2})
	require.NotNil(t, j.Spec.PodFailurePolicy)
	assert.Equal(t, []batchv1.PodFailurePolicyRule{{
		Action: batchv1.PodFailurePolicyActionFailJob,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: &j.Spec.Template.Spec.Containers[0].Name,
			Operator:      batchv1.PodFailurePolicyOnExitCodesOpIn,
			Values:        []int32{2, 3},
		},
	}}, j.Spec.PodFailurePolicy.Rules)
	assert.Equal(t, corev1.RestartPolicyNever, j.Spec.Template.Spec.RestartPolicy, "a pod failure policy requires it")
	assert.Equal(t, int32(2), *j.Spec.BackoffLimit, "other failures are still retried")

	j.Spec.PodFailurePolicy.Rules[0].OnExitCodes.Values[0] = 99
	assert.Equal(t, []int32{2, 3}, DeployerFinalExitCodes, "Jobs do not share the list")

	// A provisioning step's exit codes mean nothing to Petri.
	provision := Build(Spec{Name: "y", Image: "postgres:17", Command: []string{"psql"}, BackoffLimit: 2})
	assert.Nil(t, provision.Spec.PodFailurePolicy)
}

func TestBuildWithoutOptionalVolumes(t *testing.T) {
	j := Build(Spec{Name: "x", Image: "i"})
	assert.Len(t, j.Spec.Template.Spec.Volumes, 1)
	assert.Nil(t, j.Spec.ActiveDeadlineSeconds)
	assert.Nil(t, j.Spec.TTLSecondsAfterFinished)
	assert.Nil(t, j.Spec.PodFailurePolicy)
}

func TestFinished(t *testing.T) {
	cases := []struct {
		name          string
		conds         []batchv1.JobCondition
		done, success bool
		msg           string
	}{
		{"running", nil, false, false, ""},
		{"success criteria met is not yet complete", []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}, false, false, ""},
		{"complete", []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}, true, true, ""},
		{"failed", []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"}}, true, false, "DeadlineExceeded: Job was active longer than specified deadline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done, ok, msg := Finished(&batchv1.Job{Status: batchv1.JobStatus{Conditions: tc.conds}})
			assert.Equal(t, tc.done, done)
			assert.Equal(t, tc.success, ok)
			assert.Equal(t, tc.msg, msg)
		})
	}
}

func TestTerminationMessagePicksTheLatestFailure(t *testing.T) {
	pod := func(msg string, code int32, at time.Time) corev1.Pod {
		return corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg, FinishedAt: metav1.NewTime(at)},
		}}}}}
	}
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	got := TerminationMessage([]corev1.Pod{
		pod("Timeout: first try", 1, now.Add(-time.Minute)),
		pod("ChartNotFound: oci://x/y", 1, now),
		pod("", 0, now.Add(time.Minute)),
	})
	assert.Equal(t, "ChartNotFound: oci://x/y", got)
}

func TestPodMayRun(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d)); return &t }
	pod := func(phase corev1.PodPhase, node string, deleted *metav1.Time) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionTimestamp: deleted},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	node := func(ready corev1.ConditionStatus) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "NodeStatusUnknown", LastTransitionTime: *at(-time.Minute)}}
		}
		return n
	}
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		node      *corev1.Node
		nodeFound bool
		mayRun    bool
		why       string
	}{
		{"running, no node named", pod(corev1.PodRunning, "", nil), nil, false, true, ""},
		{"pending, no node yet", pod(corev1.PodPending, "", nil), nil, false, true, ""},
		{"running on a Ready node", pod(corev1.PodRunning, "n1", nil), node(corev1.ConditionTrue), true, true, ""},
		{"succeeded", pod(corev1.PodSucceeded, "n1", nil), nil, false, false, ""},
		{"failed", pod(corev1.PodFailed, "", nil), nil, false, false, ""},
		{"phase Unknown", pod(corev1.PodUnknown, "n1", nil), node(corev1.ConditionTrue), true, false, "its phase is Unknown"},
		{"terminating within its grace period", pod(corev1.PodRunning, "", at(10*time.Second)), nil, false, true, ""},
		{"terminating just past its grace period", pod(corev1.PodRunning, "", at(-TerminatingMargin)), nil, false, true, ""},
		{"terminating well past its grace period", pod(corev1.PodRunning, "n1", at(-TerminatingMargin-time.Second)), node(corev1.ConditionTrue), true, false, "still terminating 31s after its grace period ended"},
		{"node not Ready", pod(corev1.PodRunning, "n1", nil), node(corev1.ConditionUnknown), true, false, "its node n1 is not Ready (NodeStatusUnknown since 2026-12-02T11:59:00Z)"},
		{"node without a Ready condition", pod(corev1.PodRunning, "n1", nil), node(""), true, false, "its node n1 has not reported Ready"},
		{"node gone", pod(corev1.PodRunning, "n1", nil), nil, false, false, "its node n1 no longer exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mayRun, why := PodMayRun(tc.pod, tc.node, tc.nodeFound, now)
			assert.Equal(t, tc.mayRun, mayRun)
			if tc.why == "" {
				assert.Empty(t, why)
			} else {
				assert.Contains(t, why, tc.why)
			}
		})
	}
}
