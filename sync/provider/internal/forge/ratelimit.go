package forge

import (
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/provider"
)

// Blocker refuses calls until the end of the latest rate limit the forge
// announced.
type Blocker struct {
	clock   clock.PassiveClock
	refusal string

	mu    sync.Mutex
	until time.Time
}

// NewBlocker blocks nothing yet; refusal is the message of the error that
// refuses a call.
func NewBlocker(clk clock.PassiveClock, refusal string) *Blocker {
	return &Blocker{clock: clk, refusal: refusal}
}

// Before is a *provider.RateLimitError while a rate limit lasts, else nil.
func (b *Blocker) Before() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.clock.Now().Before(b.until) {
		return &provider.RateLimitError{Until: b.until, Err: errors.New(b.refusal)}
	}
	return nil
}

// Block refuses calls until until (unless a later limit is known already)
// and returns err as the *provider.RateLimitError that ends then.
func (b *Blocker) Block(until time.Time, err error) error {
	b.mu.Lock()
	if until.After(b.until) {
		b.until = until
	}
	b.mu.Unlock()
	return &provider.RateLimitError{Until: until, Err: err}
}
