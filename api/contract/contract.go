// Package contract is what the operator, the deployer and sync agree on
// about a Job: the labels and annotations they read, the actions a Job
// performs, the closed set of reasons a deployer run ends with, and the typed
// result the deployer writes as its termination message. It imports nothing
// of Petri, so the deployer (which carries no API types) can import it too.
//
// The result is data, not prose: the operator decodes it and acts on its
// fields (outcome, reason, retryable, revision, drifted releases); its
// message is for people and is never parsed.
package contract

// Labels on every Job (and its pods) the operator creates. The
// environment's own labels (petri.dev/environment, -uid) are in the API
// package.
const (
	// LabelComponent names the component, binding or other subject a Job
	// acts on, fitted into a label value.
	LabelComponent = "petri.dev/component"
	// LabelAction is the Job's action (ActionDeploy, ...).
	LabelAction = "petri.dev/action"
	// LabelGeneration is the environment's generation the Job belongs to.
	LabelGeneration = "petri.dev/generation"
)

// Actions a Job performs, the LabelAction values. Result.Action carries the
// deployer command, which is the same word except for a bind Job's
// ActionWriteSecret.
const (
	ActionDeploy      = "deploy"
	ActionUndeploy    = "undeploy"
	ActionBind        = "bind"
	ActionProvision   = "provision"
	ActionDeprovision = "deprovision"
	// ActionSleep and ActionWake scale an environment's workloads to zero
	// and back (petri-deployer sleep, wake).
	ActionSleep = "sleep"
	ActionWake  = "wake"
	// ActionVerify reads an environment's releases as its deployer identity
	// (petri-deployer verify).
	ActionVerify = "verify"
	// ActionWriteSecret is the deployer command a bind Job runs.
	ActionWriteSecret = "write-secret"
)

// ContainerName is the name of a Job's one container; its termination
// message is the Job's result.
const ContainerName = "main"

// AnnotationReplicasBeforeSleep is written by the sleep Job on each workload
// it scaled to zero, with the replica count it had; the wake Job restores
// exactly that count and removes it.
const AnnotationReplicasBeforeSleep = "petri.dev/replicas-before-sleep"

// What the deployer writes on every object of a release it installs or
// upgrades (a Helm post-renderer, deployer/labels.go), so that the operator
// can watch an environment's workloads through a cache that holds those
// objects only, and tell what a release asked for from what someone changed.
const (
	// LabelRelease names the Helm release (the component) the object
	// belongs to; a Helm release name is at most 53 characters of a DNS
	// label, so it is always a valid label value.
	LabelRelease = "petri.dev/release"
	// AnnotationReplicas is the spec.replicas the release's manifest gave a
	// Deployment or StatefulSet; absent when the manifest gives none (an
	// autoscaler's, or the API server's default of one).
	AnnotationReplicas = "petri.dev/replicas"
)
