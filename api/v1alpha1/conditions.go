package v1alpha1

import "github.com/petri-dev/petri/api/contract"

// Condition types. Every condition Petri writes is a metav1.Condition whose
// type is one of these; Ready is computed from the others in one place.
const (
	// ConditionReady is True when the environment (or shared workload) is fully
	// deployed for its current generation.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the controller works towards the
	// desired state of the current generation.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when progress needs a change from a person: an
	// invalid spec, a namespace that Petri does not own, or a deploy that
	// failed for the current generation (only a new generation moves it; kstatus
	// reads it as Failed).
	ConditionStalled = "Stalled"
	// ConditionNamespaceBound is True once status.targetNamespace is committed
	// and the namespace exists and is verified as the environment's own. Once
	// True, the assignment is a durable lock: it is never recomputed.
	ConditionNamespaceBound = "NamespaceBound"
	// ConditionSharedWorkloadsBound is True when every shared workload the
	// environment lists has a binding Secret and a successful provision Job.
	ConditionSharedWorkloadsBound = "SharedWorkloadsBound"
	// ConditionComponentsDeployed is True when every component's Helm release
	// is deployed for the current generation.
	ConditionComponentsDeployed = "ComponentsDeployed"
	// ConditionWorkloadsIntact says whether what the environment deployed is
	// still there. It is absent until the operator first finds something
	// gone or first verifies the releases; from then on Ready requires it.
	// False while the operator restores what was lost (the namespace
	// replaced, a release missing or at another revision, the deployer's
	// RoleBinding removed); the message names what.
	ConditionWorkloadsIntact = "WorkloadsIntact"
	// ConditionClusterPlaced is True on an environment with spec.placement
	// once status.cluster names its workload cluster and that cluster
	// answers; False while no cluster fits (the reason says why) or while
	// the cluster it is placed in does not answer. Absent for an
	// environment of the management cluster.
	ConditionClusterPlaced = "ClusterPlaced"
	// ConditionDeployed is True on a SharedWorkload whose own release is
	// deployed for the current generation.
	ConditionDeployed = "Deployed"
)

// Condition reasons, read as <Action><Outcome>. Events on a transition use the
// reason of the condition that changed.
const (
	// ReasonProgressing: work for the current generation is under way.
	ReasonProgressing = "Progressing"
	// ReasonSucceeded: the summary condition (Ready) is satisfied.
	ReasonSucceeded = "Succeeded"
	// ReasonInvalidSpec: the spec cannot be acted upon (a dependency cycle, an
	// unknown shared workload); the message names the problem.
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonNamespaceReserved: the namespace name is committed to
	// status.targetNamespace and the namespace is being created. Until
	// NamespaceBound has been True once, a name that someone else takes
	// meanwhile is given up for the next free one; after that, never.
	ReasonNamespaceReserved = "NamespaceReserved"
	// ReasonNamespaceBindSucceeded: the namespace exists and carries the
	// environment's ownership labels and UID annotation.
	ReasonNamespaceBindSucceeded = "NamespaceBindSucceeded"
	// ReasonNamespaceBindFailed: the namespace could not be created or verified.
	ReasonNamespaceBindFailed = "NamespaceBindFailed"
	// ReasonNamespaceNotOwned: the bound namespace exists but does not carry the
	// environment's ownership marks; Petri never adopts nor deletes it.
	ReasonNamespaceNotOwned = "NamespaceNotOwned"

	// ReasonClusterPlaced: status.cluster is committed and the cluster
	// answers.
	ReasonClusterPlaced = "ClusterPlaced"
	// ReasonClusterAtCapacity: every cluster the placement allows is at one
	// of its caps (or cordoned); the environment waits until one has room.
	ReasonClusterAtCapacity = "ClusterAtCapacity"
	// ReasonClusterNotFound: the placement names a WorkloadCluster that is
	// not registered, or its selector matches none.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonClusterUnreachable: the workload cluster of the environment (or
	// the only one its placement allows) does not answer, or refuses
	// Petri's credentials; nothing is changed there, nor deleted for it,
	// until it answers. The message names the cluster.
	ReasonClusterUnreachable = "ClusterUnreachable"

	// The reasons of a WorkloadCluster's Reachable condition. Every one
	// but ReasonReachable leaves the cluster unused: nothing is placed
	// there, and its environments wait (ReasonClusterUnreachable) without
	// anything changed there. No message quotes the Secret's content.

	// ReasonReachable: the cluster answers as the ServiceAccount the
	// chart's workload-cluster mode creates, and its fences refuse what
	// they must (a server-side dry run of a request each fence denies was
	// denied by it); with --require-fences=false, the fences are not
	// checked, and the message says so.
	ReasonReachable = "Reachable"
	// ReasonCredentialsMissing: the Secret the WorkloadCluster names, or
	// its key, does not exist.
	ReasonCredentialsMissing = "CredentialsMissing"
	// ReasonCredentialsInvalid: the Secret's key is not a kubeconfig whose
	// current context names a cluster and a user.
	ReasonCredentialsInvalid = "CredentialsInvalid"
	// ReasonCredentialsUnsafe: the kubeconfig's current context uses what
	// the operator refuses before connecting: exec, auth-provider,
	// tokenFile, a client certificate, key or CA file path,
	// insecure-skip-tls-verify, impersonation, basic authentication, or a
	// server that is not https; the message names the field. Only an
	// inline token or inline client certificate and key, with inline CA
	// data, are taken.
	ReasonCredentialsUnsafe = "CredentialsUnsafe"
	// ReasonCredentialsRejected: the API server refused the credentials
	// (401: revoked, expired), or the identity lacks the rights the
	// chart's workload-cluster mode grants (403).
	ReasonCredentialsRejected = "CredentialsRejected"
	// ReasonCredentialsNotPetri: the credentials authenticate (a
	// SelfSubjectReview) as another identity than the operator's
	// ServiceAccount there (system:serviceaccount:<management
	// namespace>:petri-operator), which the fences match: an
	// administrator's kubeconfig, or another ServiceAccount's token,
	// would act there unfenced. The message names the identity found and
	// the one expected.
	ReasonCredentialsNotPetri = "CredentialsNotPetri"
	// ReasonFencesMissing: a fence, its binding (with validationActions
	// Deny) or the ConfigMap of their settings is missing there, or the
	// cluster does not serve ValidatingAdmissionPolicy.
	ReasonFencesMissing = "FencesMissing"
	// ReasonFencesNotEnforced: the fences are there, but the API server
	// let through a server-side dry run of a request one of them must
	// refuse (its matchConditions or match resources changed, or another
	// admission answered first); the message names the fence.
	ReasonFencesNotEnforced = "FencesNotEnforced"

	// ReasonDeployerIdentityNotOwned: a ServiceAccount with the name of the
	// environment's deployer identity exists but does not carry the
	// environment's ownership marks; Petri never adopts it, and nothing is
	// deployed until it is gone.
	ReasonDeployerIdentityNotOwned = "DeployerIdentityNotOwned"
	// ReasonDeployerNotAuthorized: the deployer's RoleBinding exists, but
	// the API server's authorizer has not granted its rights in the workload
	// namespace within --deployer-authorization-timeout (an admin
	// ClusterRole changed, an authorization webhook refusing). Nothing is
	// started; the operator keeps asking, less and less often.
	ReasonDeployerNotAuthorized = "DeployerNotAuthorized"

	// ReasonDeploySucceeded: every release is deployed.
	ReasonDeploySucceeded = "DeploySucceeded"
	// ReasonDeployFailed: at least one deploy Job failed; the component's
	// status carries the reason.
	ReasonDeployFailed = "DeployFailed"
	// ReasonDeployProgressing: deploy Jobs are running or waiting for their
	// dependencies.
	ReasonDeployProgressing = "DeployProgressing"

	// ReasonDeployRetrying: a deploy Job failed for a reason that can pass
	// (the API server refused, a timeout, a quota, a full address range); the
	// component's status.nextRetryAt says when its next attempt starts.
	ReasonDeployRetrying = "DeployRetrying"

	// ReasonWorkloadsLost: what the environment deployed is gone (its
	// namespace was deleted and created again, or a release is missing or
	// at another revision); it is being deployed again.
	ReasonWorkloadsLost = "WorkloadsLost"
	// ReasonDeployerAccessLost: the deployer's RoleBinding in the workload
	// namespace was removed or changed; the operator created it again and
	// verifies the releases.
	ReasonDeployerAccessLost = "DeployerAccessLost"
	// ReasonWorkloadsVerified: a verify Job found every release at the
	// revision its deploy wrote.
	ReasonWorkloadsVerified = "WorkloadsVerified"
	// ReasonVerifyFailed (an Event): a verify Job could not read the
	// releases; its result says why. The next check follows.
	ReasonVerifyFailed = "VerifyFailed"
	// ReasonWorkloadsRedeployed: what was lost has been deployed again; the
	// outcome is in ComponentsDeployed.
	ReasonWorkloadsRedeployed = "WorkloadsRedeployed"

	// ReasonWorkloadsUnhealthy: the environment was deployed for its
	// generation, but a Deployment, StatefulSet or DaemonSet of its releases
	// no longer runs as they asked (kstatus does not read it as Current, or
	// it was scaled to zero by someone else); Ready is False with it, the
	// phase Degraded, and the message names each object and why. The
	// operator watches those objects and turns Ready again once they run;
	// it deploys nothing for it.
	ReasonWorkloadsUnhealthy = "WorkloadsUnhealthy"

	// ReasonBindSucceeded: every shared-workload binding is provisioned.
	ReasonBindSucceeded = "BindSucceeded"
	// ReasonBindFailed: a binding or provision Job failed.
	ReasonBindFailed = "BindFailed"
	// ReasonBindProgressing: bindings are being written or provisioned.
	ReasonBindProgressing = "BindProgressing"

	// ReasonTeardownProgressing: the environment is being deleted.
	ReasonTeardownProgressing = "TeardownProgressing"
	// ReasonTeardownFailed: a teardown step failed and is retried with backoff.
	ReasonTeardownFailed = "TeardownFailed"
	// ReasonForceDeleted: the force-delete annotation released the finalizer.
	ReasonForceDeleted = "ForceDeleted"
	// ReasonExpired: spec.ttl passed and the environment deleted itself.
	ReasonExpired = "Expired"
	// ReasonInUse: a SharedWorkload deletion waits for bound environments.
	ReasonInUse = "InUse"
	// ReasonReleaseHolderLost (an Event's reason): a Helm operation started
	// without waiting for a pod of an earlier one that had not finished but
	// never will (its node lost or not Ready, its phase Unknown, or
	// terminating long past its grace period); the Event and the
	// component's message name the pod and why.
	ReasonReleaseHolderLost = "ReleaseHolderLost"

	// ReasonSleeping: the environment is asleep (its Deployments and
	// StatefulSets scaled to zero) or its sleep Job is running. Ready is
	// False with it; an asleep environment is never Stalled.
	ReasonSleeping = "Sleeping"
	// ReasonWaking: a wake Job restores the replicas the sleep recorded.
	ReasonWaking = "Waking"
	// ReasonSleepFailed: a sleep Job failed; the next attempt follows after a
	// backoff.
	ReasonSleepFailed = "SleepFailed"
	// ReasonWakeFailed: a wake Job failed; the next attempt follows after a
	// backoff.
	ReasonWakeFailed = "WakeFailed"
)

// Well-known labels, annotations and the finalizer.
const (
	// Finalizer guards the ordered teardown of an environment or shared
	// workload.
	Finalizer = "petri.dev/cleanup"
	// AnnotationForceDelete, set to "true", releases the finalizer of a stuck
	// object without touching anything that is not provably Petri's.
	AnnotationForceDelete = "petri.dev/force-delete"
	// LabelEnvironment names the EphemeralEnvironment an object belongs to.
	LabelEnvironment = "petri.dev/environment"
	// LabelEnvironmentUID carries the UID of the EphemeralEnvironment an object
	// belongs to.
	LabelEnvironmentUID = "petri.dev/environment-uid"
	// AnnotationEnvironmentUID repeats the owning environment's UID on a
	// workload namespace; ownership is verified against both marks.
	AnnotationEnvironmentUID = "petri.dev/environment-uid"
	// AnnotationEnvironment names the owning environment as namespace/name.
	AnnotationEnvironment = "petri.dev/environment"
	// AnnotationDeployerServiceAccount names, on a workload namespace, the
	// one deployer ServiceAccount (in the management namespace) that may be
	// bound to admin there; the admission fences check RoleBindings against it.
	AnnotationDeployerServiceAccount = "petri.dev/deployer-serviceaccount"
	// AnnotationOwnershipProof, on a workload namespace, is an HMAC of the
	// namespace's name and its environment's UID under a key only the
	// operator reads (the Secret OwnershipKeySecret in the management
	// namespace). Labels and annotations can be copied by anyone who may
	// create namespaces; the proof cannot, so a namespace someone else made
	// with Petri's marks, in the moment between the operator choosing a
	// name and creating it, is never taken for the environment's.
	AnnotationOwnershipProof = "petri.dev/ownership-proof"
	// OwnershipKeySecret names the Secret (key "key") in the management
	// namespace that holds the operator's ownership key; the operator
	// creates it on first use.
	OwnershipKeySecret = "petri-operator-ownership-key"
	// AnnotationSleepRequested, an RFC 3339 time, asks the operator to put the
	// environment to sleep: a Job running as the environment's deployer
	// identity scales every Deployment and StatefulSet of its namespace to
	// zero. The environment sleeps while this time is later than both
	// AnnotationWakeRequested and the start of the current generation's
	// deploy; a value that is not an RFC 3339 time is ignored. Sync writes
	// it after the application's sleepAfter; kubectl petri sleep writes the
	// current time.
	AnnotationSleepRequested = "petri.dev/sleep-requested"
	// AnnotationWakeRequested, an RFC 3339 time, asks the operator to wake
	// the environment: a Job restores the replicas the sleep recorded. A new
	// generation (a push) or a redeploy wakes it too.
	AnnotationWakeRequested = "petri.dev/wake-requested"
	// AnnotationReplicasBeforeSleep is written by the sleep Job on each
	// Deployment and StatefulSet it scaled to zero, with the replica count
	// it had; the wake Job restores exactly that count and removes it.
	// Declared in the Job contract, which the deployer shares.
	AnnotationReplicasBeforeSleep = contract.AnnotationReplicasBeforeSleep
	// LabelManagedBy marks objects that Petri's operator created.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByOperator is the LabelManagedBy value of the operator.
	ManagedByOperator = "petri-operator"
)
