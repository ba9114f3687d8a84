// The write budget: what sync writes on a pull request is what changed for
// a person, not each step on the way. A commit status or the comment whose
// state is settled (render.Settled: Ready, Failed, a fault named, torn
// down, a wait a person may act on) is written at once; one on the way
// (deploying, tearing down) waits until it settles, for at most the
// comment's patience, and the settled state that follows is most often
// the only write. The first status of a commit is written at once too, so
// a push shows its pending check. While a forge refuses writes for a rate
// limit, the settled writes go first: the others wait until the forge has
// taken writes again for a while.

package syncer

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// DefaultCommentPatience is how long a commit status or the comment may
// wait for its state to settle before it is written all the same.
const DefaultCommentPatience = time.Minute

// pressureLag is how long after the end of a forge's rate limit the writes
// that are not settled still wait: the settled ones, queued for the end
// itself, take the forge's first writes.
const pressureLag = 2 * time.Second

// due decides when a changed write is sent: now (true), or after the
// returned wait. settled is render.Settled of its state, first that
// nothing was written there yet (the first status of a commit), stale when
// the write first differed from what is shown (zero: now), pressed until
// when the forge's writes are for settled states only.
func due(settled, first bool, stale, now time.Time, patience time.Duration, pressed time.Time) (bool, time.Duration) {
	if !settled && now.Before(pressed) {
		return false, pressed.Sub(now)
	}
	if settled || first {
		return true, 0
	}
	if stale.IsZero() {
		stale = now
	}
	if wait := stale.Add(patience).Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}

// writeBudget is the budget's memory: the patience, and until when each
// forge's writes are for settled states only. It is part of what the
// engine remembers, under the engine's lock (memory.go), as each
// repository's state is.
type writeBudget struct {
	patience time.Duration

	mu      *sync.Mutex
	pressed map[string]time.Time
}

func newWriteBudget(patience time.Duration, mu *sync.Mutex) *writeBudget {
	if patience <= 0 {
		patience = DefaultCommentPatience
	}
	return &writeBudget{patience: patience, mu: mu, pressed: map[string]time.Time{}}
}

// refused notes a forge's refusal of a pull request's writes: err is what
// the feedback failed with, a *provider.RateLimitError among it when the
// forge refused for a rate limit.
func (b *writeBudget) refused(repoKey string, err error) {
	var rle *provider.RateLimitError
	if !errors.As(err, &rle) {
		return
	}
	forge, _ := config.SplitRepositoryKey(repoKey)
	b.mu.Lock()
	defer b.mu.Unlock()
	if until := rle.Until.Add(pressureLag); until.After(b.pressed[forge]) {
		b.pressed[forge] = until
	}
}

// pressedUntil is until when the writes on a repository's forge are for
// settled states only.
func (b *writeBudget) pressedUntil(repoKey string) time.Time {
	forge, _ := config.SplitRepositoryKey(repoKey)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pressed[forge]
}

// shown is what this process last wrote on a pull request, and since when
// what it would write differs: its comment's body and the replies to
// commands in it, and per commit status since when it is stale.
type shown struct {
	body, notes string
	bodyStale   time.Time
	statusStale map[statusKey]time.Time
}

// notesOf are the replies to commands a state's comment shows.
func notesOf(st render.State) string { return strings.Join(st.Notes, "\n") }

// allSettled tells whether every application's state is settled.
func allSettled(list []render.PRState) bool {
	for _, st := range list {
		if !render.Settled(st) {
			return false
		}
	}
	return true
}
