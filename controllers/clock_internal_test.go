package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/retry"
)

// Expiry, the deploy retries and a step's backoff read the operator's
// clock: moving it is what makes them due.
func TestTimeComesFromTheClock(t *testing.T) {
	created := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(created.Add(time.Minute))
	r := &EphemeralEnvironmentReconciler{Recorder: &events.FakeRecorder{}, Options: Options{Clock: clk, TeardownBackoff: time.Second}}
	env := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "shop", Generation: 1, CreationTimestamp: metav1.NewTime(created)}}
	env.Spec.TTL = &metav1.Duration{Duration: time.Hour}
	env.Spec.Components = []petriv1.Component{{Name: "web"}}

	expired, after := r.expiry(env)
	assert.False(t, expired)
	assert.Equal(t, 59*time.Minute, after)
	clk.SetTime(created.Add(time.Hour))
	expired, _ = r.expiry(env)
	assert.True(t, expired, "due once the clock reaches it")

	// A failed attempt waits for its backoff on the same clock.
	failedAt := metav1.NewTime(clk.Now())
	env.Status.Components = []petriv1.ComponentStatus{{Name: "web", Phase: petriv1.ComponentFailed, Generation: 1, Attempt: 1, FinishedAt: &failedAt, LastError: "Timeout: not ready"}}
	cs := &env.Status.Components[0]
	r.scheduleRetry(env, cs, true)
	assert.Equal(t, clk.Now().Add(retry.DefaultBackoff).Truncate(time.Second).Add(time.Second), cs.NextRetryAt.Time)
	p := &pass{}
	r.retryDue(context.Background(), env, p)
	assert.Equal(t, petriv1.ComponentFailed, cs.Phase, "not yet")
	assert.Positive(t, p.after)
	clk.SetTime(cs.NextRetryAt.Time)
	r.retryDue(context.Background(), env, &pass{})
	assert.Equal(t, petriv1.ComponentPending, cs.Phase, "due: the next attempt starts")
	assert.Equal(t, int32(2), cs.Attempt)

	assert.Equal(t, failedAt.Add(time.Second).Sub(clk.Now()), retry.StepIn(r.Options, 1, &failedAt), "a step's backoff counts from its failure")
}
