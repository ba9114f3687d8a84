package chaos

import (
	"context"
	"time"
)

// intn and between draw from the run's seeded source.
func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Intn(n)
}

func (r *run) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return lo + time.Duration(r.rng.Int63n(int64(hi-lo)))
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitFor polls cond every interval until it is true or timeout passes.
func waitFor(ctx context.Context, timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, interval)
	}
}
