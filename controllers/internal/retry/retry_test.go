package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/options"
)

func TestRetryPolicy(t *testing.T) {
	p := PolicyOf(nil)
	assert.Equal(t, Policy{Attempts: 3, Backoff: 10 * time.Second, MaxBackoff: 5 * time.Minute}, p)
	assert.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second}, []time.Duration{p.Delay(1), p.Delay(2), p.Delay(3)})
	assert.Equal(t, 5*time.Minute, p.Delay(10), "capped")

	c := &petriv1.Component{Retry: &petriv1.RetryPolicy{Attempts: ptr.To[int32](5), Backoff: &metav1.Duration{Duration: time.Second}, MaxBackoff: &metav1.Duration{Duration: 3 * time.Second}}}
	p = PolicyOf(c)
	assert.Equal(t, int32(5), p.Attempts)
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}, []time.Duration{p.Delay(1), p.Delay(2), p.Delay(3), p.Delay(4)})
}

// One backoff for every retried step: doubled per earlier attempt, at most
// its limit; a step's next attempt is counted from its failure, on the
// operator's clock.
func TestBackoff(t *testing.T) {
	tests := []struct {
		first, limit time.Duration
		attempt      int32
		want         time.Duration
	}{
		{time.Second, 5 * time.Minute, 0, time.Second},
		{time.Second, 5 * time.Minute, 1, time.Second},
		{time.Second, 5 * time.Minute, 4, 8 * time.Second},
		{time.Second, 5 * time.Minute, 30, 5 * time.Minute},
		{10 * time.Second, 15 * time.Second, 2, 15 * time.Second},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Backoff(tt.first, tt.limit, tt.attempt), "%+v", tt)
	}

	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	o := options.Options{TeardownBackoff: 2 * time.Second, Clock: clocktesting.NewFakePassiveClock(now)}
	assert.Equal(t, 4*time.Second, StepIn(o, 2, nil), "no failure time: the whole backoff")
	failed := metav1.NewTime(now.Add(-time.Second))
	assert.Equal(t, 3*time.Second, StepIn(o, 2, &failed), "counted from the failure")
	o.Clock.(*clocktesting.FakePassiveClock).SetTime(now.Add(10 * time.Second))
	assert.Negative(t, StepIn(o, 2, &failed), "due")
}
