// Package jobs builds the Kubernetes Jobs that run Petri's Helm operations
// and provisioning steps. Pure functions: the reconciler decides when, this
// package decides what the Job looks like.
package jobs

import (
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/petri-dev/petri/api/contract"
)

// Paths inside the Job's container. The deployer reads them from flags, so a
// local runner can map them elsewhere.
const (
	ValuesDir          = "/etc/petri/values"
	ValuesFile         = ValuesDir + "/values.yaml"
	CADir              = "/etc/petri/ca"
	CAFile             = CADir + "/ca.crt"
	TmpDir             = "/tmp"
	TerminationLogPath = corev1.TerminationMessagePathDefault
	// InstanceDir holds a shared workload's instance keys in its provision
	// and deprovision Jobs, one file per key.
	InstanceDir = "/etc/petri/instance"
	// ValuesKey is the key of the values Secret.
	ValuesKey = "values.yaml"
	// DeployerEntrypoint is the deployer binary in its image.
	DeployerEntrypoint = "/petri-deployer"
)

// DeployerFinalExitCodes are the deployer's exit codes for failures that no
// retry can fix (cmd/petri-deployer: 2 invalid arguments, 3 the chart's
// kubeVersion, templates, required values or schema refused, the release's
// image not pullable or its container crashing). A Job whose
// pod exits with one of them fails at once, without the backoffLimit more
// pods that would only repeat the refusal.
var DeployerFinalExitCodes = []int32{2, 3}

// Spec describes one Job.
type Spec struct {
	Name, Namespace string
	Labels          map[string]string
	Owner           metav1.OwnerReference
	ServiceAccount  string
	Image           string
	Command         []string
	Args            []string
	Env             []corev1.EnvVar
	EnvFrom         []corev1.EnvFromSource
	// ValuesSecret, when set, is mounted at ValuesDir.
	ValuesSecret string
	// InstanceSecret, when set, is mounted at InstanceDir (a provision or
	// deprovision step's instance keys).
	InstanceSecret string
	// CASecret, when set, is mounted at CADir.
	CASecret string

	// Resources are the container's requests and limits.
	Resources corev1.ResourceRequirements

	BackoffLimit          int32
	ActiveDeadline        time.Duration
	TTLAfterFinished      time.Duration
	TerminationLogEnabled bool
}

// Build returns the Job. A replacement pod starts only once the previous one
// has fully terminated, so two Helm operations on one release never overlap.
// A Job that runs the deployer fails without another pod when the deployer
// exits with one of DeployerFinalExitCodes; other containers (provisioning
// steps) keep their exit codes' meaning to themselves and are retried up to
// BackoffLimit.
func Build(s Spec) *batchv1.Job {
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: TmpDir}}
	if s.ValuesSecret != "" {
		volumes = append(volumes, corev1.Volume{Name: "values", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s.ValuesSecret}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "values", MountPath: ValuesDir, ReadOnly: true})
	}
	if s.InstanceSecret != "" {
		volumes = append(volumes, corev1.Volume{Name: "instance", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s.InstanceSecret}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "instance", MountPath: InstanceDir, ReadOnly: true})
	}
	if s.CASecret != "" {
		volumes = append(volumes, corev1.Volume{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s.CASecret}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "ca", MountPath: CADir, ReadOnly: true})
	}
	env := append([]corev1.EnvVar{{Name: "TMPDIR", Value: TmpDir}}, s.Env...)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, Labels: s.Labels,
			OwnerReferences: []metav1.OwnerReference{s.Owner},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:         ptr.To(s.BackoffLimit),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: s.Labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: s.ServiceAccount,
					RestartPolicy:      corev1.RestartPolicyNever,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(int64(65532)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Volumes: volumes,
					Containers: []corev1.Container{{
						Name:                     contract.ContainerName,
						Image:                    s.Image,
						Command:                  s.Command,
						Args:                     s.Args,
						Env:                      env,
						EnvFrom:                  s.EnvFrom,
						VolumeMounts:             mounts,
						Resources:                *s.Resources.DeepCopy(),
						TerminationMessagePath:   TerminationLogPath,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	if len(s.Command) > 0 && s.Command[0] == DeployerEntrypoint {
		// Requires RestartPolicy Never, set above.
		job.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				ContainerName: ptr.To(contract.ContainerName),
				Operator:      batchv1.PodFailurePolicyOnExitCodesOpIn,
				Values:        slices.Clone(DeployerFinalExitCodes),
			},
		}}}
	}
	if s.ActiveDeadline > 0 {
		job.Spec.ActiveDeadlineSeconds = ptr.To(int64(s.ActiveDeadline.Seconds()))
	}
	if s.TTLAfterFinished > 0 {
		job.Spec.TTLSecondsAfterFinished = ptr.To(int32(s.TTLAfterFinished.Seconds()))
	}
	return job
}

// Finished reports whether the Job completed or failed, and which.
func Finished(j *batchv1.Job) (done, succeeded bool, message string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet:
			if c.Type == batchv1.JobComplete {
				return true, true, ""
			}
		case batchv1.JobFailed:
			msg := c.Reason
			if c.Message != "" {
				msg += ": " + c.Message
			}
			return true, false, msg
		}
	}
	return false, false, ""
}

// SucceededPod returns when the Job's pod that succeeded (every container
// ended with exit code 0) finished, and whether there is one.
func SucceededPod(pods []corev1.Pod) (*metav1.Time, bool) {
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded {
			continue
		}
		var at *metav1.Time
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && (at == nil || at.Before(&t.FinishedAt)) {
				at = t.FinishedAt.DeepCopy()
			}
		}
		return at, true
	}
	return nil, false
}

// CompletionMessage returns the termination message of the Job's pod that
// succeeded: the deployer's result of a success (contract.Result).
func CompletionMessage(pods []corev1.Pod) string {
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode == 0 && t.Message != "" {
				return t.Message
			}
		}
	}
	return ""
}

// TerminationMessage returns the most recent termination message among the
// Job's pods of a failure: the deployer's result (contract.Result), or
// whatever another container wrote.
func TerminationMessage(pods []corev1.Pod) string {
	var best string
	var at time.Time
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && t.Message != "" && !t.FinishedAt.Time.Before(at) {
				best, at = t.Message, t.FinishedAt.Time
			}
		}
	}
	return best
}

// TerminatingMargin is how long past the end of its grace period a deleted
// pod may still be terminating before it is taken for one that never ends:
// the kubelet kills it when the grace period is over and confirms within
// seconds, unless its node is gone.
const TerminatingMargin = 30 * time.Second

// PodMayRun says whether a pod that has not finished may still be running
// its work, and when not, why: its phase is Unknown (its node stopped
// reporting), it was deleted and is still terminating well past its grace
// period (metadata.deletionTimestamp is when that period ends), or its node
// is not Ready or no longer exists. node is the pod's node, nil when the pod
// names none or that node does not exist (nodeFound false). A pod that
// finished (Succeeded, Failed) runs nothing: false, with no reason.
func PodMayRun(pod *corev1.Pod, node *corev1.Node, nodeFound bool, now time.Time) (bool, string) {
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false, ""
	case corev1.PodUnknown:
		return false, "its phase is Unknown: its node stopped reporting it"
	}
	if d := pod.DeletionTimestamp; d != nil && now.Sub(d.Time) > TerminatingMargin {
		return false, fmt.Sprintf("it was deleted and is still terminating %s after its grace period ended", now.Sub(d.Time).Truncate(time.Second))
	}
	if pod.Spec.NodeName == "" {
		return true, ""
	}
	if !nodeFound {
		return false, fmt.Sprintf("its node %s no longer exists", pod.Spec.NodeName)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, fmt.Sprintf("its node %s is not Ready (%s since %s)", node.Name, nonEmpty(c.Reason, string(c.Status)), c.LastTransitionTime.UTC().Format(time.RFC3339))
		}
	}
	return false, fmt.Sprintf("its node %s has not reported Ready", node.Name)
}

func nonEmpty(s, otherwise string) string {
	if s != "" {
		return s
	}
	return otherwise
}
