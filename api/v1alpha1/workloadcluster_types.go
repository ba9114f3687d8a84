package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionReachable is a WorkloadCluster's condition: its API server
// answered with the credentials of its Secret, and Petri's identity there
// has the rights it needs.
const ConditionReachable = "Reachable"

// DefaultClusterCredentialsKey is the key of a WorkloadCluster's Secret that
// holds its kubeconfig when spec.credentials.key is not set.
const DefaultClusterCredentialsKey = "kubeconfig"

// LabelApplication names an environment's application (sync sets it);
// the Spread placement counts environments by it.
const LabelApplication = "petri.dev/application"

// LabelCluster is set on the objects Petri makes in a workload cluster for
// an environment: the WorkloadCluster's name in the management cluster.
const LabelCluster = "petri.dev/cluster"

// ClusterCredentials names the Secret, in the WorkloadCluster's namespace,
// that holds a kubeconfig of Petri's fenced identity in that cluster.
type ClusterCredentials struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
	// Key of the Secret's data that holds the kubeconfig.
	// +optional
	// +kubebuilder:default=kubeconfig
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`
}

// ClusterCapacity caps what is placed in a workload cluster. A new
// environment that would exceed any cap waits (Pending, reason
// ClusterAtCapacity) until one is freed; environments already placed are
// never moved.
type ClusterCapacity struct {
	// Environments is the most environments placed in the cluster at once
	// (deleting ones count until they are gone).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Environments int32 `json:"environments"`
	// CPU caps the sum of the placed environments' spec.placement.requests.cpu.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// Memory caps the sum of their spec.placement.requests.memory.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// WorkloadClusterSpec registers a cluster environments can be placed in.
type WorkloadClusterSpec struct {
	// Credentials of Petri's identity in the workload cluster: fenced there
	// as in the management cluster (the chart's workload-cluster mode).
	Credentials ClusterCredentials `json:"credentials"`
	// Capacity caps what is placed in the cluster.
	Capacity ClusterCapacity `json:"capacity"`
	// Cordoned keeps new environments out; those placed stay.
	// +optional
	Cordoned bool `json:"cordoned,omitempty"`
}

// WorkloadClusterStatus is what the operator sees of a workload cluster.
type WorkloadClusterStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Environments is the number of environments placed in the cluster.
	// +optional
	Environments int32 `json:"environments,omitempty"`
	// RequestedCPU and RequestedMemory are the sums of their requests.
	// +optional
	RequestedCPU *resource.Quantity `json:"requestedCPU,omitempty"`
	// +optional
	RequestedMemory *resource.Quantity `json:"requestedMemory,omitempty"`
	// Conditions: Reachable.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wc,categories=petri
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].status`
// +kubebuilder:printcolumn:name="Environments",type=integer,JSONPath=`.status.environments`
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.spec.capacity.environments`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// WorkloadCluster is a cluster, registered in the management namespace,
// that the operator places environments in.
type WorkloadCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkloadClusterSpec   `json:"spec,omitempty"`
	Status WorkloadClusterStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// WorkloadClusterList is a list of WorkloadClusters.
type WorkloadClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkloadCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&WorkloadCluster{}, &WorkloadClusterList{})
}

// PlacementStrategy chooses among the clusters a placement rule matches.
// +kubebuilder:validation:Enum=LeastLoaded;Spread
type PlacementStrategy string

// Placement strategies.
const (
	// PlacementLeastLoaded picks the cluster with the most room left, as a
	// fraction of its tightest cap.
	PlacementLeastLoaded PlacementStrategy = "LeastLoaded"
	// PlacementSpread picks the cluster with the fewest environments of the
	// same application (label petri.dev/application), then the least loaded.
	PlacementSpread PlacementStrategy = "Spread"
)

// PlacementRequests is what an environment counts against a cluster's caps.
type PlacementRequests struct {
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
}

// Placement chooses the workload cluster of an environment. It is read
// once: the chosen cluster is committed to status.cluster with the
// namespace's name, before anything is created, and never reconsidered.
// An environment without placement runs in the management cluster.
// +kubebuilder:validation:XValidation:rule="has(self.cluster) != has(self.selector)",message="placement names either a cluster or a selector, not both and not neither"
type Placement struct {
	// Cluster names a WorkloadCluster.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Cluster string `json:"cluster,omitempty"`
	// Selector matches WorkloadClusters by their labels.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Strategy chooses among the matched clusters.
	// +optional
	// +kubebuilder:default=LeastLoaded
	Strategy PlacementStrategy `json:"strategy,omitempty"`
	// Requests count against the cluster's CPU and memory caps.
	// +optional
	Requests *PlacementRequests `json:"requests,omitempty"`
}
