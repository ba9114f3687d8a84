package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/retry"
)

// Retries of failed deploys.
//
// A deploy Job that fails for a reason that can pass (the API server refused
// a request, a timeout, a quota, a full Service address range, a repository
// that did not answer) is tried again with a new Job, named after its
// attempt, after a backoff that doubles per attempt, up to the component's
// spec.retry.attempts. The component stays Failed meanwhile, with
// status.components[].nextRetryAt saying when the next attempt starts, and
// ComponentsDeployed (so Ready) says DeployRetrying: the outcome is not final.
// A failure that cannot pass (the deployer's result says it is not
// retryable, contract.Reason.Retryable) is final at once, until
// the spec changes. A deploy Job the API server refused to create counts as
// a failed attempt too, with the API server's refusal as its reason.

// retrySchedule decides when a failed deploy is attempted again, and moves
// the attempts that are due back to Pending.
type retrySchedule struct {
	recorder events.EventRecorder
	options  Options
}

// retries hands the deploy graph the reconciler's retry schedule.
func (r *EphemeralEnvironmentReconciler) retries() retrySchedule {
	return retrySchedule{recorder: r.Recorder, options: r.Options}
}

// scheduleRetry is retrySchedule.schedule with the reconciler's recorder
// and clock.
func (r *EphemeralEnvironmentReconciler) scheduleRetry(env *petriv1.EphemeralEnvironment, cs *petriv1.ComponentStatus, retryable bool) {
	r.retries().schedule(env, cs, retryable)
}

// retryDue is retrySchedule.due with the reconciler's clock.
func (r *EphemeralEnvironmentReconciler) retryDue(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) {
	r.retries().due(ctx, env, p)
}

// schedule decides, for a component whose deploy attempt just failed
// with cs.LastError, whether another attempt follows, and when; retryable is
// what the failure's result said. It sets cs.NextRetryAt (nil when the
// failure is final or the attempts are used up) and reports the Event.
func (rs retrySchedule) schedule(env *petriv1.EphemeralEnvironment, cs *petriv1.ComponentStatus, retryable bool) {
	p := retry.PolicyOf(findComponent(env, cs.Name))
	attempt := max(cs.Attempt, 1)
	cs.NextRetryAt = nil
	switch {
	case !retryable:
		rs.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployFailed, "Deploy", "component %s failed: %s", cs.Name, cs.LastError)
		return
	case attempt >= p.Attempts:
		cs.Message = fmt.Sprintf("failed after %d attempts", attempt)
		rs.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployFailed, "Deploy", "component %s failed after %d attempts: %s", cs.Name, attempt, cs.LastError)
		return
	}
	at := retry.At(rs.options, p, attempt, cs.FinishedAt)
	cs.NextRetryAt = &at
	cs.Message = fmt.Sprintf("attempt %d of %d failed; attempt %d starts at %s", attempt, p.Attempts, attempt+1, at.UTC().Format(time.RFC3339))
	rs.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployRetrying, "Deploy", "component %s failed (attempt %d of %d): %s; retrying at %s",
		cs.Name, attempt, p.Attempts, cs.LastError, at.UTC().Format(time.RFC3339))
}

// due moves components whose next attempt is due back to Pending, with
// the attempt counted up, so the deploy graph starts them with a new Job;
// for the others it asks to be woken when theirs is.
func (rs retrySchedule) due(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) {
	for _, c := range env.Spec.Components {
		cs := componentStatus(env, c.Name)
		if cs.Phase != petriv1.ComponentFailed || cs.NextRetryAt == nil || cs.Generation != env.Generation {
			continue
		}
		if wait := rs.options.Until(cs.NextRetryAt.Time); wait > 0 {
			p.requeueAfter(wait)
			continue
		}
		cs.Phase, cs.NextRetryAt, cs.Attempt = petriv1.ComponentPending, nil, max(cs.Attempt, 1)+1
		cs.Message = fmt.Sprintf("attempt %d starting", cs.Attempt)
		log.FromContext(ctx).Info("Retrying deploy", "component", cs.Name, "attempt", cs.Attempt, "lastError", cs.LastError)
	}
}

// retrying reports whether the component failed and waits for its next
// attempt.
func retrying(cs *petriv1.ComponentStatus) bool {
	return cs.Phase == petriv1.ComponentFailed && cs.NextRetryAt != nil
}
