package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RefreshAnnotationPrefix begins the annotations that ask sync's leader to
// look at a repository again: a replica that does not lead records each
// webhook it receives as one of them on the repository's Repository (as
// Argo CD marks an ApplicationSet to refresh), and the leader, whose
// reconciler watches Repositories, takes them and passes over the
// repository. The name after the prefix says what to look at again
// (repository, config, resync, pr.<number>, comments.<number>); the value is
// when the webhook arrived (RFC 3339).
const RefreshAnnotationPrefix = "refresh.petri.dev/"

// RepositorySpec names the repository, as a pull request's state does.
type RepositorySpec struct {
	// Forge is the kind of forge the repository is on.
	// +kubebuilder:validation:Enum=github;gitlab;gitea;forgejo
	// +kubebuilder:default=github
	Forge string `json:"forge"`
	// Repository is owner/name (GitLab: a project path,
	// group/subgroup/project), in lower case.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=512
	Repository string `json:"repository"`
}

// Repository is one repository that sync's replicas share as a key: the
// object a webhook received by a replica that does not lead is recorded
// on (refresh annotations), and that sync's leader reconciles. It lives in
// sync's own namespace, where only sync's identity may write; it holds no
// payload of a webhook, only what to look at again, since the leader reads
// the forge itself.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=petri
// +kubebuilder:printcolumn:name="Forge",type=string,JSONPath=`.spec.forge`
// +kubebuilder:printcolumn:name="Repository",type=string,JSONPath=`.spec.repository`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Repository struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the repository.
	Spec RepositorySpec `json:"spec"`
}

// RepositoryList is a list of Repositories.
// +kubebuilder:object:root=true
type RepositoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Repository `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Repository{}, &RepositoryList{})
}
