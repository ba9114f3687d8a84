package syncer_test

import (
	"sync"
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
// of waiting it out. Every reading catches up with the wall clock first
// (plus what was skipped): a ticker alone falls behind on a loaded
// machine, and sync would see the GitHub stand-in's times, which are the
// wall clock's, as in its future.
type testClock struct {
	*clocktesting.FakeClock
	mu sync.Mutex
	// ahead is how far the clock was moved past the wall clock.
	ahead time.Duration
}

// clockPace is how often the test clock catches up with the wall clock
// when nothing reads it: the precision of sync's timers in the tests.
const clockPace = 5 * time.Millisecond

func newTestClock(t *testing.T) *testClock {
	c := &testClock{FakeClock: clocktesting.NewFakeClock(wall.Now())}
	tick := wall.NewTicker(clockPace)
	done := make(chan struct{})
	t.Cleanup(func() {
		tick.Stop()
		close(done)
	})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-tick.C():
				c.catchUp()
			}
		}
	}()
	return c
}

// catchUp moves the clock to the wall clock's time plus what was skipped,
// when it is behind that.
func (c *testClock) catchUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := wall.Now().Add(c.ahead).Sub(c.FakeClock.Now()); d > 0 {
		c.FakeClock.Step(d)
	}
}

// Now is the clock's time, caught up with the wall clock.
func (c *testClock) Now() time.Time {
	c.catchUp()
	return c.FakeClock.Now()
}

// Since is the time passed since t on this clock.
func (c *testClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Step moves the clock ahead by d, past the wall clock.
func (c *testClock) Step(d time.Duration) {
	c.catchUp()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ahead += d
	c.FakeClock.Step(d)
}

// skipTo moves the clock ahead to at (not back: it is already later).
func (c *testClock) skipTo(at time.Time) {
	if d := at.Sub(c.Now()); d > 0 {
		c.Step(d)
	}
}
