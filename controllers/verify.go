package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/retry"
)

// Verification of the releases.
//
// Only the deployer identity may read a workload namespace, so the operator
// asks it: a verify Job runs `petri-deployer verify`, which reads each
// component's latest Helm release record and compares it with the revision
// the component's deploy Job reported (status.components[].revision). Its
// result is Succeeded, or Drifted (after one pod) naming the releases found
// missing or at another revision, which are deployed again
// (workloadRecovery.recover); its message says what differs for people.
//
// A verify Job runs once per --verify-interval for an environment whose
// deploy graph is done and whose Jobs have all finished, and right after the
// deployer's RoleBinding was found gone and created again. Its name is fixed
// by the period (or the event), so a restarted operator adopts it and no
// environment has more than one per period.

// verifySubject stands for the environment's releases in verify Job names.
const verifySubject = "releases"

// verifying reports whether the latest verify Job is still running.
func verifying(env *petriv1.EphemeralEnvironment) bool {
	v := env.Status.Verification
	return v != nil && v.Job != "" && v.FinishedAt == nil
}

// verify follows the running verify Job and starts the periodic one when it
// is due, once the deploy graph's outcome is written, and not while the
// environment sleeps.
func (r *VerifyReconciler) verify(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	if sleepHolds(env) {
		// Not while it sleeps, or while a sleep or wake Job runs: the
		// verification follows the wake.
		return nil
	}
	if verifying(env) {
		return r.observeVerification(ctx, env, p)
	}
	if r.Options.VerifyInterval <= 0 || !deployedAndSettled(env) {
		return nil
	}
	c := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionWorkloadsIntact)
	if c != nil && c.Status == metav1.ConditionFalse {
		return nil
	}
	since := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionComponentsDeployed).LastTransitionTime.Time
	if v := env.Status.Verification; v != nil && v.StartedAt != nil && v.StartedAt.After(since) {
		since = v.StartedAt.Time
	}
	if wait := r.Options.Until(since.Add(r.Options.VerifyInterval)); wait > 0 {
		p.requeueAfter(wait)
		return nil
	}
	return r.startVerification(ctx, env, p, jobs.VerifyTriggerPeriodic)
}

// deployedAndSettled reports whether every component of the spec is deployed
// for the current generation and no Job of the environment runs.
func deployedAndSettled(env *petriv1.EphemeralEnvironment) bool {
	if !apimeta.IsStatusConditionTrue(env.Status.Conditions, petriv1.ConditionComponentsDeployed) || conditionGeneration(env, petriv1.ConditionComponentsDeployed) != env.Generation {
		return false
	}
	return settled(env)
}

// startVerification creates a verify Job for the components deployed now.
// Its name is fixed by the trigger: the period it falls in, or the moment
// the deployer's access was found lost.
func (r *EphemeralEnvironmentReconciler) startVerification(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass, trigger string) error {
	if verifying(env) {
		// One at a time; the verify controller follows it.
		return nil
	}
	cause := &naming.VerifyCause{Trigger: trigger}
	switch trigger {
	case jobs.VerifyTriggerPeriodic:
		period := max(r.Options.VerifyInterval, time.Second)
		cause.Key = strconv.FormatInt(r.Options.Now().UnixNano()/int64(period), 10)
	default:
		c := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionWorkloadsIntact)
		if c != nil {
			cause.Key = c.LastTransitionTime.UTC().Format(time.RFC3339)
		}
		if v := env.Status.Verification; v != nil && v.Trigger == trigger && v.FinishedAt != nil && !v.FinishedAt.Before(&c.LastTransitionTime) {
			// The check after this loss ran and could not tell: the next
			// one follows after the backoff.
			if wait := retry.StepIn(r.Options, 1, v.FinishedAt); wait > 0 {
				p.requeueAfter(wait)
				return nil
			}
			cause.Retry = v.FinishedAt.Unix()
		}
	}
	var expect []string
	for _, c := range env.Spec.Components {
		cs := componentStatus(env, c.Name)
		if cs.Phase == petriv1.ComponentDeployed {
			expect = append(expect, "--expect", fmt.Sprintf("%s=%d", c.Name, cs.Revision))
		}
	}
	if len(expect) == 0 {
		// Nothing is deployed that could have been lost.
		verified(env, trigger, "nothing deployed to verify")
		return nil
	}
	key := jobs.EnvironmentKey(env, contract.ActionVerify, verifySubject, env.Generation)
	key.Verify = cause
	name := key.Name()
	args := append([]string{"verify",
		"--namespace", env.Status.TargetNamespace,
		"--termination-log", jobs.TerminationLogPath,
	}, expect...)
	if v := env.Status.Verification; v != nil && v.Job != "" && v.Job != name {
		// The previous one failed (a verified one is gone already) and was
		// kept for its log until now.
		if err := objects.DeleteKeptJob(ctx, r.Client, r.Options.ManagementNamespace, v.Job); err != nil {
			return err
		}
	}
	if err := r.jobs().create(ctx, env, name, jobLabels(env, verifySubject, contract.ActionVerify, env.Generation), args, ""); err != nil {
		return err
	}
	now := r.Options.MetaNow()
	env.Status.Verification = &petriv1.VerificationStatus{Job: name, Trigger: trigger, StartedAt: &now}
	log.FromContext(ctx).Info("Started verify job", "job", name, "trigger", trigger)
	return nil
}

// observeVerification records the outcome of the running verify Job: the
// releases verified, or what is lost deployed again.
func (r *VerifyReconciler) observeVerification(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	v := env.Status.Verification
	st, err := r.jobs().observeLive(ctx, p, v.Job)
	if err != nil {
		return err
	}
	now := r.Options.MetaNow()
	switch {
	case !st.Exists:
		// Deleted, or removed by its TTL while the operator was down: the
		// next one finds out.
		v.FinishedAt, v.Result = &now, fmt.Sprintf("job %s is gone before its outcome was seen", v.Job)
		return nil
	case !st.Done:
		return nil
	}
	jobwatch.Record(contract.ActionVerify, st)
	v.FinishedAt = &now
	if st.Finished != nil {
		v.FinishedAt = st.Finished
	}
	v.Result = jobs.OneLine(st.Message)
	if st.Succeeded {
		if v.Result == "" {
			v.Result = "Verified"
		}
		verified(env, v.Trigger, v.Result)
		// Its outcome is in status.verification now: the Job and its
		// pod go (prune.go).
		return objects.DeleteFinishedJob(ctx, r.Client, r.Options.ManagementNamespace, v.Job)
	}
	var drifted []string
	if st.Typed && st.Result.Outcome == contract.OutcomeDrifted {
		drifted = st.Result.Drifted
	}
	var lost []string
	for _, name := range drifted {
		// A component deployed again since the Job started is not judged
		// by what the Job read.
		cs := componentStatus(env, name)
		if findComponent(env, name) != nil && !slices.Contains(lost, name) && cs.Phase == petriv1.ComponentDeployed && (cs.FinishedAt == nil || !cs.FinishedAt.After(v.StartedAt.Time)) {
			lost = append(lost, name)
		}
	}
	if len(lost) == 0 {
		// The Job could not tell (refused, timed out): a failed check, not
		// a finding. The next period tries again; a check after lost access
		// is retried after the backoff.
		r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonVerifyFailed, "Verify", "verify job %s failed: %s", v.Job, v.Result)
		if v.Trigger == jobs.VerifyTriggerAccess {
			p.requeueAfter(retry.StepIn(r.Options, 1, v.FinishedAt))
		}
		return nil
	}
	r.recovery().recover(ctx, env, false, lost, fmt.Sprintf("verify job %s found: %s", v.Job, v.Result))
	return nil
}

// verified marks the releases verified.
func verified(env *petriv1.EphemeralEnvironment, trigger, result string) {
	msg := fmt.Sprintf("every release is at the revision its deploy wrote (%s; checked after: %s)", result, trigger)
	setCondition(env, petriv1.ConditionWorkloadsIntact, metav1.ConditionTrue, petriv1.ReasonWorkloadsVerified, msg)
}
