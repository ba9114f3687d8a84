package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ChartReference names one exact chart version. Version constraints are
// resolved by whoever writes the object; the operator only deploys exact
// versions so that a re-run deploys the same bits.
type ChartReference struct {
	// Repository is where the chart comes from: an https:// chart repository
	// (its index.yaml is consulted for the exact version), an oci:// registry
	// reference without the chart name, or an absolute path to a chart
	// directory or archive inside the deployer image.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('oci://') || self.startsWith('/')",messageExpression="'repository ' + self + ' must be an https:// chart repository, an oci:// reference or an absolute path inside the deployer image'"
	Repository string `json:"repository"`

	// Name is the chart's name in the repository. Ignored for a path that
	// points at a chart directory or archive.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`
	Name string `json:"name"`

	// Version is the exact semantic version of the chart (1.4.2, 1.4.2-rc.1).
	// Ranges such as ~1.4 are refused.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?(0|[1-9][0-9]*)\\\\.(0|[1-9][0-9]*)\\\\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\\\\+[0-9A-Za-z.-]+)?$')",messageExpression="'version ' + self + ' must be an exact semantic version such as 1.4.2, not a range'"
	Version string `json:"version"`
}

// ContainerTemplate is the part of a container that a provision or deprovision
// Job needs. The binding Secret's keys are added to its environment.
type ContainerTemplate struct {
	// Image runs the step.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Command overrides the image's entrypoint.
	// +optional
	Command []string `json:"command,omitempty"`
	// Args are passed to the command.
	// +optional
	Args []string `json:"args,omitempty"`
	// Env adds environment variables next to the binding Secret's keys.
	// Values are literal: a valueFrom (secretKeyRef, configMapKeyRef,
	// fieldRef) is refused, since a step runs in the management namespace
	// where it could name any of Petri's Secrets; it reads its credentials
	// from the binding Secret alone.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(e, !has(e.valueFrom))",message="valueFrom is refused in a step's env; give literal values (the step reads its credentials from the binding Secret)"
	Env []corev1.EnvVar `json:"env,omitempty"`
}

// ReleaseOptions tune how a Helm release is deployed.
type ReleaseOptions struct {
	// Wait makes the deploy Job wait until the release's workloads are
	// ready (their pods running and passing their readiness probes) before
	// the release counts as deployed; true when unset. While it waits, the
	// deploy reads the release's pods: an image that cannot be pulled, a
	// container that keeps crashing or pods the namespace refuses fail it
	// at once, and a wait that runs out of time names the pods that were
	// not ready and why. false deploys without waiting: the environment can
	// be Ready while its pods do not run, and its status says it was not
	// waited for.
	// +optional
	Wait *bool `json:"wait,omitempty"`
	// Timeout bounds one Helm operation, waiting included. Defaults to 5m.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// Waits reports whether a deploy of the release waits for its workloads:
// unless Wait is false.
func (o ReleaseOptions) Waits() bool { return o.Wait == nil || *o.Wait }

// NotWaitedFor is what the status says of a release deployed with
// wait: false.
const NotWaitedFor = "not waited for: release.wait is false"
