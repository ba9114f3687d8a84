package syncer_test

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// wall is the real clock, for what a test measures in real time (a
// latency, a takeover) and what others date by it (git commits, Leases).
var wall = clock.RealClock{}

// testClock is sync's clock in the tests. It keeps pace with the wall
// clock, so sync's work queues, timers and tickers run on it as on the
// real one, and a test moves it ahead to skip a ttl or an idle time instead
// of waiting it out.
type testClock struct {
	*clocktesting.FakeClock
}

// clockPace is how often the test clock catches up with the wall clock:
// the precision of sync's timers in the tests.
const clockPace = 5 * time.Millisecond

func newTestClock(t *testing.T) *testClock {
	c := &testClock{clocktesting.NewFakeClock(wall.Now())}
	tick := wall.NewTicker(clockPace)
	done := make(chan struct{})
	t.Cleanup(func() {
		tick.Stop()
		close(done)
	})
	go func() {
		last := wall.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C():
				c.Step(now.Sub(last))
				last = now
			}
		}
	}()
	return c
}

// skipTo moves the clock ahead to at (not back: it is already later).
func (c *testClock) skipTo(at time.Time) {
	if d := at.Sub(c.Now()); d > 0 {
		c.Step(d)
	}
}
