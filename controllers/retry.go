package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
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

// Defaults of spec.components[].retry; the CRD defaults its fields to the same
// values when the object is given.
const (
	defaultRetryAttempts   = 3
	defaultRetryBackoff    = 10 * time.Second
	defaultRetryMaxBackoff = 5 * time.Minute
)

// retryPolicy is a component's spec.retry with the defaults filled in.
type retryPolicy struct {
	attempts            int32
	backoff, maxBackoff time.Duration
}

func policyOf(c *petriv1.Component) retryPolicy {
	p := retryPolicy{attempts: defaultRetryAttempts, backoff: defaultRetryBackoff, maxBackoff: defaultRetryMaxBackoff}
	if c == nil || c.Retry == nil {
		return p
	}
	if c.Retry.Attempts != nil && *c.Retry.Attempts > 0 {
		p.attempts = *c.Retry.Attempts
	}
	if c.Retry.Backoff != nil && c.Retry.Backoff.Duration > 0 {
		p.backoff = c.Retry.Backoff.Duration
	}
	if c.Retry.MaxBackoff != nil && c.Retry.MaxBackoff.Duration > 0 {
		p.maxBackoff = c.Retry.MaxBackoff.Duration
	}
	return p
}

// delay is the wait after the given attempt failed.
func (p retryPolicy) delay(attempt int32) time.Duration {
	return backoff(p.backoff, p.maxBackoff, attempt)
}

// backoff is the one backoff of the operator: the wait after the given
// attempt failed is first doubled per earlier attempt, at most limit. A
// failed deploy waits by its component's spec.retry; every other step (an
// undeploy, a deprovision, a sleep or wake, a verification after lost
// access) by the teardown backoff, at most stepMaxBackoff.
func backoff(first, limit time.Duration, attempt int32) time.Duration {
	d := first
	for i := int32(1); i < attempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// stepMaxBackoff bounds the backoff of the steps retried by the teardown
// backoff.
const stepMaxBackoff = 5 * time.Minute

// stepRetryIn is how long until the next attempt of a step (not a deploy)
// whose given attempt failed at finishedAt: the teardown backoff, counted
// from the failure; the whole backoff when the failure time is unknown.
func stepRetryIn(o Options, attempt int32, finishedAt *metav1.Time) time.Duration {
	d := backoff(o.TeardownBackoff, stepMaxBackoff, attempt)
	if finishedAt == nil {
		return d
	}
	return o.Until(finishedAt.Add(d))
}

// scheduleRetry decides, for a component whose deploy attempt just failed
// with cs.LastError, whether another attempt follows, and when; retryable is
// what the failure's result said. It sets cs.NextRetryAt (nil when the
// failure is final or the attempts are used up) and reports the Event.
func (r *EphemeralEnvironmentReconciler) scheduleRetry(env *petriv1.EphemeralEnvironment, cs *petriv1.ComponentStatus, retryable bool) {
	p := policyOf(findComponent(env, cs.Name))
	attempt := max(cs.Attempt, 1)
	cs.NextRetryAt = nil
	switch {
	case !retryable:
		r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployFailed, "Deploy", "component %s failed: %s", cs.Name, cs.LastError)
		return
	case attempt >= p.attempts:
		cs.Message = fmt.Sprintf("failed after %d attempts", attempt)
		r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployFailed, "Deploy", "component %s failed after %d attempts: %s", cs.Name, attempt, cs.LastError)
		return
	}
	at := retryAt(r.Options, p, attempt, cs.FinishedAt)
	cs.NextRetryAt = &at
	cs.Message = fmt.Sprintf("attempt %d of %d failed; attempt %d starts at %s", attempt, p.attempts, attempt+1, at.UTC().Format(time.RFC3339))
	r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployRetrying, "Deploy", "component %s failed (attempt %d of %d): %s; retrying at %s",
		cs.Name, attempt, p.attempts, cs.LastError, at.UTC().Format(time.RFC3339))
}

// retryAt is when the next attempt after the given failed one starts: the
// policy's delay after the failure (now, when that is unknown or later),
// on the next whole second.
func retryAt(o Options, p retryPolicy, attempt int32, finishedAt *metav1.Time) metav1.Time {
	from := o.Now()
	if finishedAt != nil && finishedAt.Time.Before(from) {
		from = finishedAt.Time
	}
	return metav1.NewTime(from.Add(p.delay(attempt)).Truncate(time.Second).Add(time.Second))
}

// retryDue moves components whose next attempt is due back to Pending, with
// the attempt counted up, so the deploy graph starts them with a new Job;
// for the others it asks to be woken when theirs is.
func (r *EphemeralEnvironmentReconciler) retryDue(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) {
	for _, c := range env.Spec.Components {
		cs := componentStatus(env, c.Name)
		if cs.Phase != petriv1.ComponentFailed || cs.NextRetryAt == nil || cs.Generation != env.Generation {
			continue
		}
		if wait := r.Options.Until(cs.NextRetryAt.Time); wait > 0 {
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
