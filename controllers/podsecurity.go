package controllers

import (
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/options"
)

// Pod Security of the namespaces Petri places workloads in.
//
// Every namespace the operator creates for an environment, and the shared
// namespace, enforces one level of the Pod Security Standards through the
// API server's Pod Security admission: the installation's
// --workload-pod-security, which the admission fences read too (key
// workload-pod-security of the ConfigMap petri-operator). The operator sets
// it when it creates a namespace and puts it back on the next pass when a
// namespace carries another. Nothing an environment's spec, a pull request
// or a chart says moves it: the deployer identities may not change their
// namespace, and the fences let the operator set no other level and change
// nothing else of a namespace.

// PodSecurityLevels are the levels --workload-pod-security takes.
var PodSecurityLevels = options.PodSecurityLevels

// DefaultWorkloadPodSecurity is the level of an installation that names
// none (options.DefaultWorkloadPodSecurity).
const DefaultWorkloadPodSecurity = options.DefaultWorkloadPodSecurity

// The Pod Security admission labels the operator sets
// (objects.PodSecurityLabels).
const (
	LabelPodSecurityEnforce        = objects.LabelPodSecurityEnforce
	LabelPodSecurityEnforceVersion = objects.LabelPodSecurityEnforceVersion
)
