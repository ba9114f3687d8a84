package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Component is one Helm release of the environment.
// +kubebuilder:validation:XValidation:rule="!has(self.dependsOn) || !(self.name in self.dependsOn)",messageExpression="'component ' + self.name + ' cannot depend on itself'"
type Component struct {
	// Name identifies the component and is its Helm release name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Chart is the exact chart this component deploys.
	Chart ChartReference `json:"chart"`

	// Values are the component's Helm values. spec.values[name] is deep-merged
	// over them.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// DependsOn names components that must be deployed before this one starts.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=53
	DependsOn []string `json:"dependsOn,omitempty"`

	// Uses names shared workloads (from spec.sharedWorkloads) whose binding
	// Secret this component needs; it starts only after they are provisioned.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	Uses []string `json:"uses,omitempty"`

	// Release tunes the Helm operation.
	// +optional
	Release ReleaseOptions `json:"release,omitempty"`

	// Retry bounds how a deploy that failed for a reason that can pass (the
	// API server refused, a timeout, a quota, a full address range) is tried
	// again, each time with a new Job. A failure that cannot pass (the chart
	// or its version not found, values or templates refused) is final until
	// the spec changes. Defaults: 3 attempts, 10s backoff doubled per
	// attempt, at most 5m.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`
}

// RetryPolicy bounds the attempts of a component's deploy.
type RetryPolicy struct {
	// Attempts is the most deploy Jobs run for one generation, the first
	// included; 1 turns retries off.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=20
	Attempts *int32 `json:"attempts,omitempty"`
	// Backoff is the wait between a failed attempt and the next; it doubles
	// per attempt.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="backoff must be between 1s and 1h"
	Backoff *metav1.Duration `json:"backoff,omitempty"`
	// MaxBackoff caps the doubled wait.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="maxBackoff must be between 1s and 24h"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// Source records where the environment came from. The operator never reads it;
// it is provenance for people and tools.
type Source struct {
	// Repository is the source repository, such as owner/name.
	// +optional
	Repository string `json:"repository,omitempty"`
	// Branch is the pull request's head branch.
	// +optional
	Branch string `json:"branch,omitempty"`
	// SHA is the head commit the resolved artifacts were built from.
	// +optional
	SHA string `json:"sha,omitempty"`
	// PullRequest is the pull request number.
	// +optional
	PullRequest int `json:"pullRequest,omitempty"`
	// URL links to the pull request.
	// +optional
	URL string `json:"url,omitempty"`
}

// EphemeralEnvironmentSpec is the desired environment: releases, their values,
// the shared workloads they bind to.
// +kubebuilder:validation:XValidation:rule="self.components.all(c, !has(c.dependsOn) || c.dependsOn.all(d, self.components.exists(o, o.name == d)))",message="every dependsOn entry must name a component in spec.components"
// +kubebuilder:validation:XValidation:rule="self.components.all(c, !has(c.uses) || c.uses.all(u, has(self.sharedWorkloads) && u in self.sharedWorkloads))",message="every uses entry must name a shared workload in spec.sharedWorkloads"
type EphemeralEnvironmentSpec struct {
	// Components are the Helm releases that make up the environment. Names are
	// unique (the list is a map keyed by name).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Components []Component `json:"components"`

	// Values are resolved values (image tags, digests, hosts) keyed by
	// component name, deep-merged over that component's values.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Values map[string]apiextensionsv1.JSON `json:"values,omitempty"`

	// SharedWorkloads are the names of SharedWorkloads (in this namespace) the
	// environment binds to.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	SharedWorkloads []string `json:"sharedWorkloads,omitempty"`

	// Source is provenance only; the operator never acts on it.
	// +optional
	Source *Source `json:"source,omitempty"`

	// TTL deletes the environment when creationTimestamp + ttl has passed.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// Placement chooses a workload cluster; without it the environment runs
	// in the management cluster. Read once, before the namespace is chosen.
	// +optional
	Placement *Placement `json:"placement,omitempty"`
}

// AnnotationRedeploy asks the operator to run an environment's deploy graph
// again without a spec change (a new Job per component, Helm upgrade
// semantics): each new value of the annotation is one request, honoured once
// and recorded in status.lastRedeploy. kubectl petri redeploy sets it to the
// current time.
const AnnotationRedeploy = "petri.dev/redeploy"

// EnvironmentPhase is the one-word state shown by kubectl get.
// +kubebuilder:validation:Enum=Pending;Deploying;Ready;Degraded;Failed;Stalled;Deleting;Sleeping
type EnvironmentPhase string

// Environment phases.
const (
	EnvironmentPending   EnvironmentPhase = "Pending"
	EnvironmentDeploying EnvironmentPhase = "Deploying"
	EnvironmentReady     EnvironmentPhase = "Ready"
	// EnvironmentDegraded: deployed for its generation, but a workload of
	// its releases stopped running (Ready False, WorkloadsUnhealthy, naming
	// each object and why); Ready again once they run. Nothing is deployed
	// for it.
	EnvironmentDegraded EnvironmentPhase = "Degraded"
	EnvironmentFailed   EnvironmentPhase = "Failed"
	EnvironmentStalled  EnvironmentPhase = "Stalled"
	EnvironmentDeleting EnvironmentPhase = "Deleting"
	// EnvironmentSleeping: asleep (status.sleep.asleep, Reconciling False),
	// or a sleep or wake Job is running (Reconciling True).
	EnvironmentSleeping EnvironmentPhase = "Sleeping"
)

// ComponentPhase is where one component's release stands.
// +kubebuilder:validation:Enum=Pending;Deploying;Deployed;Failed;Undeploying;Undeployed
type ComponentPhase string

// Component phases.
const (
	ComponentPending     ComponentPhase = "Pending"
	ComponentDeploying   ComponentPhase = "Deploying"
	ComponentDeployed    ComponentPhase = "Deployed"
	ComponentFailed      ComponentPhase = "Failed"
	ComponentUndeploying ComponentPhase = "Undeploying"
	ComponentUndeployed  ComponentPhase = "Undeployed"
)

// ComponentStatus is the observed state of one component's release.
type ComponentStatus struct {
	// Name of the component.
	Name string `json:"name"`
	// Phase of the component's release for Generation.
	Phase ComponentPhase `json:"phase"`
	// Generation of the environment this phase belongs to.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Job is the name of the Job (in the management namespace) that did the
	// latest operation; its pod keeps the logs.
	// +optional
	Job string `json:"job,omitempty"`
	// Attempt counts the Jobs run for the current operation; a failed
	// deploy that can pass, or a failed teardown step, is retried with a new
	// Job and backoff.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// NextRetryAt is when the next attempt of a failed deploy starts; unset
	// when none is due (the failure is final, or the limit is reached).
	// +optional
	NextRetryAt *metav1.Time `json:"nextRetryAt,omitempty"`
	// Revision is the Helm revision the latest successful deploy Job wrote;
	// a verification expects the release at it.
	// +optional
	Revision int32 `json:"revision,omitempty"`
	// StartedAt is when the latest operation started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the latest operation finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message explains the phase, such as the component a Pending one waits for.
	// +optional
	Message string `json:"message,omitempty"`
	// LastError is the one-line reason of the latest failure, from the Job
	// pod's termination message.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// BindingStatus is the observed state of one shared-workload binding.
type BindingStatus struct {
	// Name of the SharedWorkload.
	Name string `json:"name"`
	// Phase of the binding: Pending, Deploying (provisioning), Deployed
	// (provisioned), Failed, Undeploying (deprovisioning), Undeployed.
	Phase ComponentPhase `json:"phase"`
	// Generation of the environment at which this binding started. It names
	// the binding's Jobs, so a shared workload removed from the spec
	// (deprovisioned) and listed again is bound and provisioned anew.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Secret is the binding Secret's name in the workload namespace.
	// +optional
	Secret string `json:"secret,omitempty"`
	// Job is the latest bind, provision or deprovision Job.
	// +optional
	Job string `json:"job,omitempty"`
	// Attempt counts the Jobs run for the current step.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Recovery is the environment's status.recoveries when this binding
	// started; it goes into the names of its Jobs, so a binding run again
	// because its namespace was replaced gets Jobs of its own.
	// +optional
	Recovery int32 `json:"recovery,omitempty"`
	// Redeploy is the redeploy request (petri.dev/redeploy) that started a
	// failed binding again; it goes into the names of its Jobs, so the new
	// Jobs are not mistaken for the failed ones.
	// +optional
	Redeploy string `json:"redeploy,omitempty"`
	// SharedRecovery is the shared workload's status.recoveries its
	// provision step ran against. When the shared workload was found lost
	// and deployed again (its namespace or release gone, and what the
	// provision step made in it), the provision step runs again, in Jobs
	// named by the new count.
	// +optional
	SharedRecovery int32 `json:"sharedRecovery,omitempty"`
	// Message explains the phase, such as what the binding waits for.
	// +optional
	Message string `json:"message,omitempty"`
	// StartedAt is when the latest step started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the latest step finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// LastError is the reason of the latest failure.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// EphemeralEnvironmentStatus is the observed state of an environment.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cluster) || (has(self.cluster) && self.cluster == oldSelf.cluster)",message="status.cluster is committed once and never changes"
type EphemeralEnvironmentStatus struct {
	// ObservedGeneration is the generation whose outcome is final.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// TargetNamespace is the workload namespace. Committed before the
	// namespace is created and never changed once NamespaceBound is True.
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`
	// Cluster is the WorkloadCluster the environment is placed in, committed
	// with targetNamespace and never changed; empty is the management
	// cluster.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// NamespaceUID is the UID of the workload namespace the environment is
	// deployed in. A namespace under the same name with another UID was
	// deleted and created again: everything in it is gone, and the
	// environment is deployed again.
	// +optional
	NamespaceUID string `json:"namespaceUID,omitempty"`
	// NamespaceNonce is a random value the operator commits before it
	// creates the workload namespace. The namespace's ownership proof
	// (annotation petri.dev/ownership-proof) covers it, and it is replaced
	// as soon as that namespace is verified and its UID recorded, so a proof
	// copied from an earlier namespace of the same name proves nothing.
	// +optional
	NamespaceNonce string `json:"namespaceNonce,omitempty"`
	// Recoveries counts the times the operator deployed the environment
	// again on its own because what it had deployed was gone (its namespace
	// replaced, a release missing or at another revision). It goes into the
	// names of the Jobs of the new deploy.
	// +optional
	Recoveries int32 `json:"recoveries,omitempty"`
	// Verification is the latest check, by a Job running as the deployer
	// identity, that every component's release exists at its revision.
	// +optional
	Verification *VerificationStatus `json:"verification,omitempty"`
	// Phase is a one-word summary for kubectl get.
	// +optional
	Phase EnvironmentPhase `json:"phase,omitempty"`
	// Conditions: NamespaceBound, SharedWorkloadsBound, WorkloadsIntact, ComponentsDeployed,
	// Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Components is the state of each component's release.
	// +optional
	// +listType=map
	// +listMapKey=name
	Components []ComponentStatus `json:"components,omitempty"`
	// SharedWorkloads is the state of each binding.
	// +optional
	// +listType=map
	// +listMapKey=name
	SharedWorkloads []BindingStatus `json:"sharedWorkloads,omitempty"`
	// ExpiresAt is when spec.ttl deletes the environment.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// LastRedeploy is the value of the petri.dev/redeploy annotation whose
	// deploy the operator started; another value asks for one more.
	// +optional
	LastRedeploy string `json:"lastRedeploy,omitempty"`
	// DeployStartedAt is when the first Job of the current generation's
	// deploy (or of its latest redeploy) started, to the microsecond: a
	// sleep request older than it is stale.
	// +optional
	DeployStartedAt *metav1.MicroTime `json:"deployStartedAt,omitempty"`
	// Sleep records the sleep and wake requests the operator honoured and
	// the Job that carries out the latest one; absent until the first sleep.
	// +optional
	Sleep *SleepStatus `json:"sleep,omitempty"`
}

// VerificationStatus is the latest verify Job of an environment.
type VerificationStatus struct {
	// Job is the verify Job, in the management namespace.
	// +optional
	Job string `json:"job,omitempty"`
	// Trigger says why it ran: Periodic, or the event that made the
	// operator look (DeployerAccessLost).
	// +optional
	Trigger string `json:"trigger,omitempty"`
	// StartedAt is when the Job was created.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when its outcome was seen; unset while it runs.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Result is the Job's one-line outcome: "Verified", or what is missing
	// ("ReleaseMissing: web", "RevisionMismatch: web 3 != 4").
	// +optional
	Result string `json:"result,omitempty"`
}

// Sleep and wake actions, the values of status.sleep.action.
const (
	SleepActionSleep = "sleep"
	SleepActionWake  = "wake"
)

// SleepStatus is where an environment stands between asleep and awake. The
// replica counts a wake restores are not kept here but on the workloads
// themselves (the petri.dev/replicas-before-sleep annotation), where the
// sleep Job, running as the environment's deployer identity, wrote them.
type SleepStatus struct {
	// Asleep is true from the moment a sleep Job succeeded until a wake Job
	// succeeded: the environment's Deployments and StatefulSets are scaled
	// to zero.
	Asleep bool `json:"asleep"`
	// Since is when Asleep took its current value.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// SleepRequested is the petri.dev/sleep-requested value the latest sleep
	// honoured.
	// +optional
	SleepRequested string `json:"sleepRequested,omitempty"`
	// WakeRequested is the petri.dev/wake-requested value the latest wake
	// honoured; empty when a deploy (a new generation, a redeploy) woke the
	// environment.
	// +optional
	WakeRequested string `json:"wakeRequested,omitempty"`
	// Action is what the latest Job does: sleep or wake.
	// +optional
	// +kubebuilder:validation:Enum=sleep;wake
	Action string `json:"action,omitempty"`
	// Job is the latest sleep or wake Job, in the management namespace; its
	// pod keeps the log.
	// +optional
	Job string `json:"job,omitempty"`
	// Generation of the environment when the Job started; with the request it
	// goes into the Job's name.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Attempt counts the Jobs run for the current action; a failed one is
	// retried with a new Job after a backoff.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// StartedAt is when the latest Job started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the latest Job finished; unset while it runs.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// LastError is the one-line reason the latest Job failed.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// EphemeralEnvironment is one running copy of an application, usually for one
// pull request, in a namespace of its own.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ee,categories=petri
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.status.targetNamespace`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.cluster`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EphemeralEnvironment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired environment.
	Spec EphemeralEnvironmentSpec `json:"spec"`
	// Status is the observed environment.
	// +optional
	Status EphemeralEnvironmentStatus `json:"status,omitempty"`
}

// EphemeralEnvironmentList is a list of EphemeralEnvironments.
// +kubebuilder:object:root=true
type EphemeralEnvironmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EphemeralEnvironment `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EphemeralEnvironment{}, &EphemeralEnvironmentList{})
}
