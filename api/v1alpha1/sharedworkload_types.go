package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InstanceSecretSpec lists the keys generated once for a shared workload.
type InstanceSecretSpec struct {
	// Keys are generated (random, URL-safe) the first time they are needed,
	// written once and never rotated.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:items:MaxLength=253
	Keys []string `json:"keys"`
	// Length is the number of characters of each generated value.
	// +optional
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=256
	Length int32 `json:"length,omitempty"`
}

// BindingSecretSpec lists the keys generated for each binding: an
// environment's own credentials on the shared instance (a database role's
// password), which no other environment holds.
type BindingSecretSpec struct {
	// Keys are generated (random, URL-safe) when an environment's binding is
	// staged, with values of its own for every binding, and kept for the
	// binding's life: its provision step, its components and its deprovision
	// step see the same values.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:items:MaxLength=253
	Keys []string `json:"keys"`
	// Length is the number of characters of each generated value.
	// +optional
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=256
	Length int32 `json:"length,omitempty"`
}

// SharedWorkloadSpec is a workload deployed once into the shared namespace and
// bound by many environments.
// +kubebuilder:validation:XValidation:rule="!has(self.bindingSecret) || !has(self.binding) || self.bindingSecret.keys.all(k, !(k in self.binding))",message="a key of bindingSecret.keys is also a key of binding; a binding key is either rendered or generated"
// +kubebuilder:validation:XValidation:rule="!has(self.bindingSecret) || !has(self.instanceSecret) || self.bindingSecret.keys.all(k, !(k in self.instanceSecret.keys))",message="a key of bindingSecret.keys is also a key of instanceSecret.keys; an environment's keys and the instance's keys are apart"
type SharedWorkloadSpec struct {
	// Chart deploys the shared workload itself, through a Job like a component.
	Chart ChartReference `json:"chart"`

	// Values are the shared workload's Helm values. The instance keys are
	// available to the chart under .Values.instanceSecret.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Values *apiextensionsv1.JSON `json:"values,omitempty"`

	// Release tunes the Helm operation.
	// +optional
	Release ReleaseOptions `json:"release,omitempty"`

	// InstanceSecret lists keys generated once for the shared workload: the
	// instance's own credentials (an admin password). They reach its chart
	// and its provision and deprovision steps, never an environment's
	// namespace.
	// +optional
	InstanceSecret *InstanceSecretSpec `json:"instanceSecret,omitempty"`

	// BindingSecret lists keys generated for each binding (an environment's
	// own password), written into its binding Secret beside the Binding keys.
	// +optional
	BindingSecret *BindingSecretSpec `json:"bindingSecret,omitempty"`

	// Provision runs once per binding environment, with the binding's keys
	// and the instance keys in its environment (create a database and a
	// user).
	// +optional
	Provision *ContainerTemplate `json:"provision,omitempty"`

	// Deprovision runs at an environment's teardown with the same binding
	// keys the provision step saw, and the instance keys (drop the database
	// and the user).
	// +optional
	Deprovision *ContainerTemplate `json:"deprovision,omitempty"`

	// Binding holds the keys rendered into each binding Secret. Values are
	// Go templates over the environment: {{ .Environment }},
	// {{ .Namespace }}, {{ .SharedNamespace }}, {{ .Hash }}.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Binding map[string]string `json:"binding,omitempty"`
}

// SharedWorkloadStatus is the observed state of a shared workload.
type SharedWorkloadStatus struct {
	// ObservedGeneration is the generation whose outcome is final.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is a one-word summary for kubectl get.
	// +optional
	Phase EnvironmentPhase `json:"phase,omitempty"`
	// Conditions: Deployed, Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Release is the state of the shared workload's own release.
	// +optional
	Release *ComponentStatus `json:"release,omitempty"`
	// InstanceSecret is the name of the Secret holding the generated keys.
	// +optional
	InstanceSecret string `json:"instanceSecret,omitempty"`
	// BoundEnvironments counts the environments bound to this workload.
	// +optional
	BoundEnvironments int32 `json:"boundEnvironments,omitempty"`
	// NamespaceUID is the UID of the shared namespace the release was
	// deployed in; the same name with another UID means the release and
	// everything in the namespace are gone.
	// +optional
	NamespaceUID string `json:"namespaceUID,omitempty"`
	// Recoveries counts the times the release was found lost (its namespace
	// deleted, or a verify Job finding it missing or at another revision)
	// and deployed again; it goes into the new Jobs' names.
	// +optional
	Recoveries int32 `json:"recoveries,omitempty"`
	// Verification is the latest verify Job of the release.
	// +optional
	Verification *VerificationStatus `json:"verification,omitempty"`
	// Cluster is the workload cluster this shared workload is deployed in;
	// empty for the management cluster. It is set on the copies the
	// operator makes of a shared workload, one per workload cluster that
	// has environments using it (docs/clusters.md).
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Clusters are the workload clusters the shared workload is deployed in
	// besides the management cluster, each by a copy of its own named
	// <name>.<cluster>.
	// +optional
	// +listType=set
	Clusters []string `json:"clusters,omitempty"`
}

// SharedWorkload is a workload (a database server, a queue) deployed once into
// the shared namespace and bound by many environments.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sw,categories=petri
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Bound",type=integer,JSONPath=`.status.boundEnvironments`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.cluster`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SharedWorkload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired shared workload.
	Spec SharedWorkloadSpec `json:"spec"`
	// Status is the observed shared workload.
	// +optional
	Status SharedWorkloadStatus `json:"status,omitempty"`
}

// SharedWorkloadList is a list of SharedWorkloads.
// +kubebuilder:object:root=true
type SharedWorkloadList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SharedWorkload `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SharedWorkload{}, &SharedWorkloadList{})
}
