package controllers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// The operator's time. Every decision that compares with the present (a
// TTL, a backoff, a verification period, when a Job started or a failure
// was seen) reads Options.Clock, nowhere else, so tests move time instead
// of waiting for it.

// clock is Options.Clock, the real clock when none is given.
func (o Options) clock() clock.PassiveClock {
	if o.Clock != nil {
		return o.Clock
	}
	return clock.RealClock{}
}

// now is the present.
func (o Options) now() time.Time { return o.clock().Now() }

// metaNow is the present as an object's timestamp.
func (o Options) metaNow() metav1.Time { return metav1.NewTime(o.now()) }

// microNow is the present to the microsecond.
func (o Options) microNow() metav1.MicroTime { return metav1.NewMicroTime(o.now()) }

// until is how long until t; negative once it passed.
func (o Options) until(t time.Time) time.Duration { return t.Sub(o.now()) }
