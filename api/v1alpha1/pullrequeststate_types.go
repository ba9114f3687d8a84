package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PullRequestStateSpec is what sync remembers of one pull request across
// restarts and leaders. It lives in the cluster, where only sync's identity
// may write it, and never on the forge: a pull request's author can write
// any comment, so nothing a comment says steers sync. sync's comment on the
// pull request shows this state; it is output only.
type PullRequestStateSpec struct {
	// Forge is the kind of forge the repository is on (github).
	// +kubebuilder:validation:Enum=github;gitlab;gitea
	// +kubebuilder:default=github
	Forge string `json:"forge"`
	// Repository is the pull request's repository, owner/name (GitLab:
	// a project path, group/subgroup/project).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=512
	Repository string `json:"repository"`
	// Number is the pull request's number.
	// +kubebuilder:validation:Minimum=1
	Number int64 `json:"number"`

	// LastCommand is the id of the newest command comment handled
	// (accepted or refused); no comment at or below it is acted on again.
	// +optional
	LastCommand int64 `json:"lastCommand,omitempty"`
	// Notes are sync's replies to the latest commands, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:MaxLength=1024
	Notes []string `json:"notes,omitempty"`
	// ActiveSHA and ActiveAt are the last push (a head commit first seen)
	// or command: an application's sleepAfter counts from ActiveAt.
	// +optional
	ActiveSHA string `json:"activeSHA,omitempty"`
	// +optional
	ActiveAt *metav1.Time `json:"activeAt,omitempty"`
	// Kept is set by /petri keep: no environment of the pull request
	// expires.
	// +optional
	Kept bool `json:"kept,omitempty"`
	// MergeGroups are the commits of the merge groups of GitHub's merge
	// queue that hold this pull request and wait for the status of an
	// application whose mergeQueue is environment: the pull request's
	// feedback posts that status on them as its environment deploys, is
	// Ready or fails, until the group is destroyed. Newest last; the oldest
	// is forgotten beyond five.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:Pattern=`^[0-9a-f]{40}$`
	MergeGroups []string `json:"mergeGroups,omitempty"`
	// Applications hold what belongs to each application's environment.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Applications []ApplicationLifecycle `json:"applications,omitempty"`
}

// ApplicationLifecycle is the lifecycle of one application's environment of
// a pull request.
type ApplicationLifecycle struct {
	// Name is the application's, as in the config repository.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// ReadySHA is the head commit whose first Ready, at ReadyAt, started the
	// environment's ttl.
	// +optional
	ReadySHA string `json:"readySHA,omitempty"`
	// +optional
	ReadyAt *metav1.Time `json:"readyAt,omitempty"`
	// ExtendedUntil is the expiry /petri extend asked for.
	// +optional
	ExtendedUntil *metav1.Time `json:"extendedUntil,omitempty"`
	// ExpiresAt is when the environment expires, as sync computes it from
	// the ttl, ReadyAt, ExtendedUntil and Kept; empty when it does not.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// ExpiredSHA is the head commit at which the environment expired, at
	// ExpiredAt; the environment is not made again for that commit.
	// +optional
	ExpiredSHA string `json:"expiredSHA,omitempty"`
	// +optional
	ExpiredAt *metav1.Time `json:"expiredAt,omitempty"`
	// Deployment is the forge's deployment of DeploymentSHA (GitHub
	// Deployments), and DeploymentState the last status sync posted on it.
	// +optional
	Deployment int64 `json:"deployment,omitempty"`
	// +optional
	DeploymentSHA string `json:"deploymentSHA,omitempty"`
	// +optional
	DeploymentState string `json:"deploymentState,omitempty"`
}

// PullRequestState is sync's record of one pull request: commands handled,
// kept or extended, the commit an environment expired at, the forge's
// deployment ids. Only sync writes it; kubectl, the web page and the
// pull-request comment show it.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=prstate,categories=petri
// +kubebuilder:printcolumn:name="Repository",type=string,JSONPath=`.spec.repository`
// +kubebuilder:printcolumn:name="Number",type=integer,JSONPath=`.spec.number`
// +kubebuilder:printcolumn:name="Kept",type=boolean,JSONPath=`.spec.kept`
// +kubebuilder:printcolumn:name="Active",type=date,JSONPath=`.spec.activeAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PullRequestState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is sync's state of the pull request.
	Spec PullRequestStateSpec `json:"spec"`
}

// PullRequestStateList is a list of PullRequestStates.
// +kubebuilder:object:root=true
type PullRequestStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PullRequestState `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PullRequestState{}, &PullRequestStateList{})
}
