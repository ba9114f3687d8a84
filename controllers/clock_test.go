package controllers_test

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// testClock is the operator's clock in these tests (Options.Clock), and the
// one the tests read the present from: the real time plus an offset that
// only moves forward, so a test can step it and the operator sees the same
// present as the test.
var testClock = &steppedClock{}

type steppedClock struct {
	mu     sync.Mutex
	offset time.Duration
}

var _ clock.PassiveClock = (*steppedClock)(nil)

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clock.RealClock{}.Now().Add(c.offset)
}

func (c *steppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Step moves the clock forward by d.
func (c *steppedClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}
