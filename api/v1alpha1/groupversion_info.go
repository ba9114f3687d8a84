// Package v1alpha1 holds the Petri API: EphemeralEnvironment, one running copy of
// an application per pull request, and SharedWorkload, a workload deployed once
// and bound by many environments.
//
// +kubebuilder:object:generate=true
// +groupName=petri.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every Petri resource.
	GroupVersion = schema.GroupVersion{Group: "petri.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Petri types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Petri types to a scheme; clients and managers call it
	// once at start-up.
	AddToScheme = SchemeBuilder.AddToScheme
)
