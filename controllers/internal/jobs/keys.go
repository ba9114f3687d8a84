package jobs

import (
	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// The keys of the Jobs (and the values Secrets) the operator creates: every
// name is naming.JobKey.Name of one of these, so a restarted operator
// derives the name of the Job it already started and adopts it.

// ValuesSubject names the values Secret of a deploy among a subject's
// objects.
const ValuesSubject = "values"

// SharedSubject stands for a shared workload's one release.
const SharedSubject = "release"

// EnvironmentKey is the key of a Job of the environment at a generation.
func EnvironmentKey(env *petriv1.EphemeralEnvironment, action, subject string, gen int64) naming.JobKey {
	return naming.JobKey{Owner: env.Name, UID: env.UID, Action: action, Subject: subject, Generation: gen}
}

// DeployName names a component's deploy Job for the current generation
// and attempt. After a redeploy the honoured request, and after the operator
// deployed lost workloads again its count of such recoveries, are in the
// key, so the new Job is not mistaken for the finished one of the same
// generation, and a restarted operator still finds the Job it started. A
// retry (attempt 2 on) has the attempt in its name.
func DeployName(env *petriv1.EphemeralEnvironment, component string, attempt int32) string {
	key := EnvironmentKey(env, contract.ActionDeploy, component, env.Generation)
	key.Redeploy, key.Recovery = env.Status.LastRedeploy, env.Status.Recoveries
	if attempt > 1 {
		key.Attempt = attempt
	}
	return key.Name()
}

// BindingKey is the key of a binding's bind, provision or deprovision
// Job: named by the binding's epoch and the recovery it belongs to.
func BindingKey(env *petriv1.EphemeralEnvironment, bs *petriv1.BindingStatus, action string) naming.JobKey {
	key := EnvironmentKey(env, action, bs.Name, BindingEpoch(bs))
	key.Recovery, key.Redeploy = bs.Recovery, bs.Redeploy
	if action == contract.ActionProvision {
		key.SharedRecovery = bs.SharedRecovery
	}
	return key
}

// SharedKey is the key of a Job of a shared workload's release.
func SharedKey(sw *petriv1.SharedWorkload, action string, gen int64) naming.JobKey {
	return naming.JobKey{Owner: sw.Name, UID: sw.UID, Action: action, Subject: SharedSubject, Generation: gen}
}

// BindingEpoch names a binding's Jobs: they are named by the generation at which the binding started
// (its epoch): a shared workload removed from the spec is deprovisioned, and
// listed again it needs a bind and a provision of its own, not the finished
// Jobs of the earlier binding. Bindings recorded before the epoch existed
// have generation 0 and the names they always had (epoch 1).
func BindingEpoch(bs *petriv1.BindingStatus) int64 { return max(bs.Generation, 1) }

// Triggers of a verification, recorded in status.verification.trigger.
const (
	VerifyTriggerPeriodic = "Periodic"
	VerifyTriggerAccess   = petriv1.ReasonDeployerAccessLost
)
