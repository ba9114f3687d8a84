package options

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// The operator's time. Every decision that compares with the present (a
// TTL, a backoff, a verification period, when a Job started or a failure
// was seen) reads Options.Clock, nowhere else, so tests move time instead
// of waiting for it.

// Time is Options.Clock, the real clock when none is given.
func (o Options) Time() clock.PassiveClock {
	if o.Clock != nil {
		return o.Clock
	}
	return clock.RealClock{}
}

// Now is the present.
func (o Options) Now() time.Time { return o.Time().Now() }

// MetaNow is the present as an object's timestamp.
func (o Options) MetaNow() metav1.Time { return metav1.NewTime(o.Now()) }

// MicroNow is the present to the microsecond.
func (o Options) MicroNow() metav1.MicroTime { return metav1.NewMicroTime(o.Now()) }

// Until is how long until t; negative once it passed.
func (o Options) Until(t time.Time) time.Duration { return t.Sub(o.Now()) }
