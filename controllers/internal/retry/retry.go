// Package retry holds the operator's one Backoff and the retry policy of
// a component's deploy: when the next attempt after a failed one starts.
// The controllers decide whether a failure is retried; this package says
// when.
package retry

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/options"
)

// // A deploy Job that fails for a reason that can pass (the API server refused
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
	DefaultAttempts   = 3
	DefaultBackoff    = 10 * time.Second
	DefaultMaxBackoff = 5 * time.Minute
)

// Policy is a component's spec.retry with the defaults filled in.
type Policy struct {
	Attempts            int32
	Backoff, MaxBackoff time.Duration
}

// PolicyOf is c's policy; a nil component has the defaults.
func PolicyOf(c *petriv1.Component) Policy {
	p := Policy{Attempts: DefaultAttempts, Backoff: DefaultBackoff, MaxBackoff: DefaultMaxBackoff}
	if c == nil || c.Retry == nil {
		return p
	}
	if c.Retry.Attempts != nil && *c.Retry.Attempts > 0 {
		p.Attempts = *c.Retry.Attempts
	}
	if c.Retry.Backoff != nil && c.Retry.Backoff.Duration > 0 {
		p.Backoff = c.Retry.Backoff.Duration
	}
	if c.Retry.MaxBackoff != nil && c.Retry.MaxBackoff.Duration > 0 {
		p.MaxBackoff = c.Retry.MaxBackoff.Duration
	}
	return p
}

// Delay is the wait after the given attempt failed.
func (p Policy) Delay(attempt int32) time.Duration {
	return Backoff(p.Backoff, p.MaxBackoff, attempt)
}

// Backoff is the one backoff of the operator: the wait after the given
// attempt failed is first doubled per earlier attempt, at most limit. A
// failed deploy waits by its component's spec.retry; every other step (an
// undeploy, a deprovision, a sleep or wake, a verification after lost
// access) by the teardown backoff, at most StepMaxBackoff.
func Backoff(first, limit time.Duration, attempt int32) time.Duration {
	d := first
	for i := int32(1); i < attempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// StepMaxBackoff bounds the backoff of the steps retried by the teardown
// backoff.
const StepMaxBackoff = 5 * time.Minute

// StepIn is how long until the next attempt of a step (not a deploy)
// whose given attempt failed at finishedAt: the teardown backoff, counted
// from the failure; the whole backoff when the failure time is unknown.
func StepIn(o options.Options, attempt int32, finishedAt *metav1.Time) time.Duration {
	d := Backoff(o.TeardownBackoff, StepMaxBackoff, attempt)
	if finishedAt == nil {
		return d
	}
	return o.Until(finishedAt.Add(d))
}

// At is when the next attempt after the given failed one starts: the
// policy's delay after the failure (now, when that is unknown or later),
// on the next whole second.
func At(o options.Options, p Policy, attempt int32, finishedAt *metav1.Time) metav1.Time {
	from := o.Now()
	if finishedAt != nil && finishedAt.Time.Before(from) {
		from = finishedAt.Time
	}
	return metav1.NewTime(from.Add(p.Delay(attempt)).Truncate(time.Second).Add(time.Second))
}
