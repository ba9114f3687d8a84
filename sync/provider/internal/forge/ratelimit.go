package forge

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
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

// Answer maps a forge's failed answer to what sync acts on, the same way
// for every forge: without an answer (status 0) it is err itself; 404 is
// provider.ErrNotFound; 429 is a rate limit that blocks further calls
// until the Retry-After it announces, else until reset says (a forge's
// window end), else for a minute; any other status is err, with the
// status in front unless named says err's text has it already.
func (b *Blocker) Answer(status int, h http.Header, err error, named bool, reset func(http.Header) (time.Time, bool)) error {
	switch status {
	case 0:
		return err
	case http.StatusNotFound:
		return fmt.Errorf("%w: %v", provider.ErrNotFound, err)
	case http.StatusTooManyRequests:
		return b.Block(b.RetryAfter(h, reset), err)
	}
	if named {
		return err
	}
	return fmt.Errorf("%d: %w", status, err)
}

// RetryAfter is when a rate limit an answer announces ends: its
// Retry-After (in seconds), else what reset reads from it, else a minute
// from now; never in the past.
func (b *Blocker) RetryAfter(h http.Header, reset func(http.Header) (time.Time, bool)) time.Time {
	now := b.clock.Now()
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return now.Add(time.Duration(s) * time.Second)
	}
	if reset != nil {
		if until, ok := reset(h); ok && until.After(now) {
			return until
		}
	}
	return now.Add(time.Minute)
}
