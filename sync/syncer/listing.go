// The listing of a repository's open pull requests, kept for a moment: a
// pass answering pull-request webhooks whose payloads are the news takes the
// last listing, with those payloads merged in as snapshots, instead of
// listing again (under a burst of pushes each listing is a changed one, a
// request charged to the rate limit, for what the webhooks already said).

package syncer

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/petri-dev/petri/sync/provider"
)

// listingReuse is how long a listing may stand in for the next ones of its
// repository: until the next periodic resync would list anyway (a change
// whose webhook was lost waits for that resync whether or not webhook
// passes listed in between), and never for more than half snapshotWindow,
// so that a snapshot merged over it is never one the window has dropped.
// A resync, a hand-over, a webhook without its pull request and any pass
// without a webhook list again.
func (rc *repoController) listingReuse() time.Duration {
	return min(rc.resyncInterval, snapshotWindow/2)
}

// keptListing is the last listing of a repository.
type keptListing struct {
	// at is when the listing was asked for.
	at  time.Time
	prs map[int]provider.PullRequest
}

// listOpen returns the repository's open pull requests: the kept listing
// when it may stand in (reuseListing), otherwise a new listing, which is
// kept. A failed listing drops the kept one: the pass that retries lists.
func (rc *repoController) listOpen(ctx context.Context, rs *repoState, forge repoForge, mustList bool) ([]provider.PullRequest, error) {
	now := rc.clock.Now()
	if prs, ok := rs.reuseListing(now, rc.listingReuse(), mustList); ok {
		return prs, nil
	}
	rs.mu.Lock()
	// Snapshots from now on may be newer than what the listing shows.
	rs.sinceListing = map[int]bool{}
	rs.listing = nil
	rs.mu.Unlock()
	listed, err := forge.source.ListOpenPullRequests(ctx, forge.path)
	if err != nil {
		return nil, err
	}
	l := &keptListing{at: now, prs: make(map[int]provider.PullRequest, len(listed))}
	for _, pr := range listed {
		l.prs[pr.Number] = pr
	}
	rs.mu.Lock()
	rs.listing = l
	rs.mu.Unlock()
	return listed, nil
}

// reuseListing returns the kept listing when it may stand in for a new
// one: it is younger than maxAge, the pass answers pull-request
// webhooks with their payloads (and nothing else that lists, mustList: the
// pass answers no resync and no hand-over naming a pull request), and each
// of those names a pull
// request the listing has, or one that is closed. The snapshots are merged
// in as over any listing (mergeSnapshots), and kept until a listing shows
// them: one that lags behind them never takes them back. A snapshot of an
// open pull request the listing does not have asks for a new listing,
// which shows at once every one opened since.
func (rs *repoState) reuseListing(now time.Time, maxAge time.Duration, mustList bool) ([]provider.PullRequest, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	l := rs.listing
	if l == nil || mustList || len(rs.sinceListing) == 0 || now.Before(l.at) || now.Sub(l.at) >= maxAge {
		return nil, false
	}
	for n := range rs.sinceListing {
		snap, ok := rs.snapshots[n]
		have, listed := l.prs[n]
		switch {
		case !ok, !listed && snap.Open():
			return nil, false
		case listed && snap.UpdatedAt.Equal(have.UpdatedAt) && !reflect.DeepEqual(snap, have):
			// GitHub's times are to the second, and webhooks may come out
			// of order: which of the two is the newer only a listing says.
			return nil, false
		}
	}
	rs.sinceListing = map[int]bool{}
	out := make([]provider.PullRequest, 0, len(l.prs))
	for _, n := range slices.Sorted(maps.Keys(l.prs)) {
		out = append(out, l.prs[n])
	}
	return out, true
}
