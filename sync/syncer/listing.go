// Listing: the first step of a repository's observe. What the pass answers
// (the webhooks since the last pass, the pull requests a hand-over named, a
// resync) is taken, the open pull requests are listed, webhook snapshots
// newer than the listing are merged in, and pull requests the listing does
// not show as open are read on their own.
//
// The listing of a repository's open pull requests is kept for a moment: a
// pass answering pull-request webhooks whose payloads are the news takes the
// last listing, with those payloads merged in as snapshots, instead of
// listing again (under a burst of pushes each listing is a changed one, a
// request charged to the rate limit, for what the webhooks already said).

package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/petri-dev/petri/sync/provider"
)

// listPullRequests takes what the pass answers and lists the repository's
// open pull requests into o, snapshots merged in. It returns the pull
// requests to read on their own: those a hand-over named, and those whose
// fresh snapshot the listing does not show. A failed listing gives back
// what was taken, for the pass that retries.
func (rc *repoController) listPullRequests(ctx context.Context, o *observation) (map[int]bool, error) {
	since, hints, resync := o.rs.takePending()
	o.since, o.resync = since, resync
	listed, err := rc.listOpen(ctx, o.rs, o.forge, len(hints) > 0 || resync)
	if err != nil {
		o.rs.putPending(since, hints)
		return nil, err
	}
	var unlistedSnapshots []int
	o.open, unlistedSnapshots = o.rs.mergeSnapshots(listed, rc.clock.Now())
	for _, n := range unlistedSnapshots {
		if hints == nil {
			hints = map[int]bool{}
		}
		hints[n] = true
	}
	o.openBy = map[int]provider.PullRequest{}
	for _, pr := range o.open {
		o.openBy[pr.Number] = pr
	}
	return hints, nil
}

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

// snapshotWindow is how long a webhook's snapshot may be ahead of GitHub's
// listing (the listing lags behind a push or a close by seconds); past it,
// the listing has caught up and is the truth. snapshotSkew allows GitHub's
// clock to be a little ahead of ours.
const (
	snapshotWindow = 10 * time.Minute
	snapshotSkew   = time.Minute
)

// snapshotFresh tells whether a snapshot dated t may still be ahead of the
// listing at now. One dated in the future (a forged delivery, a skewed
// clock) never is: it would otherwise override every later listing.
func snapshotFresh(t, now time.Time) bool {
	age := now.Sub(t)
	return age < snapshotWindow && age > -snapshotSkew
}

// mergeSnapshots overlays webhook snapshots that are newer than the
// listing, while they are fresh. Snapshots the listing caught up with, and
// stale ones, are dropped. A fresh snapshot of an open pull request the
// listing does not show is not taken as open: it may have been closed
// since (a lost webhook), so its number is returned to be read on its own.
func (rs *repoState) mergeSnapshots(listed []provider.PullRequest, now time.Time) ([]provider.PullRequest, []int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]provider.PullRequest, 0, len(listed))
	var unlisted []int
	seen := map[int]bool{}
	for _, pr := range listed {
		seen[pr.Number] = true
		if snap, ok := rs.snapshots[pr.Number]; ok {
			if snap.UpdatedAt.After(pr.UpdatedAt) && snapshotFresh(snap.UpdatedAt, now) {
				if snap.Open() {
					out = append(out, snap)
				}
				continue
			}
			delete(rs.snapshots, pr.Number)
		}
		out = append(out, pr)
	}
	for n, snap := range rs.snapshots {
		if seen[n] {
			continue
		}
		// Not listed: an opened pull request the listing does not show yet
		// is read on its own (the listing lags; the pull request may also
		// have been closed since, its webhook lost); a closed one is
		// confirmed through GetPullRequest.
		if snap.Open() && snapshotFresh(snap.UpdatedAt, now) {
			unlisted = append(unlisted, n)
		} else {
			delete(rs.snapshots, n)
		}
	}
	slices.Sort(unlisted)
	return out, unlisted
}

// takePending takes what the pass answers: the oldest webhook's arrival,
// the pull requests a hand-over named, and whether a resync is due. A pass
// answers a resync only when it took it here, before its listing: one under
// way when the resync is asked for listed before it, and leaves it to the
// next.
func (rs *repoState) takePending() (since time.Time, hints map[int]bool, resync bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	since, hints, resync = rs.pendingSince, rs.hints, rs.resyncDue
	rs.pendingSince, rs.hints, rs.resyncDue = time.Time{}, map[int]bool{}, false
	return since, hints, resync
}

// putPending gives them back to a pass that could not list or read them.
func (rs *repoState) putPending(since time.Time, hints map[int]bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.pendingSince.IsZero() || (!since.IsZero() && since.Before(rs.pendingSince)) {
		rs.pendingSince = since
	}
	for n := range hints {
		rs.hints[n] = true
	}
}

// readUnlisted reads on its own each pull request that has an environment
// but is not listed as open (only one read as closed is evidence; a failed
// read leaves the environment alone), and each one named by an event
// another replica handed over, whose hand-over carries no payload to stand
// in for a listing that lags. A pull request whose every environment is
// being deleted is not read: nothing a read could say changes what is done
// to them (a plan leaves an environment being deleted alone), and while a
// teardown of many runs, every pass would read them all again. One
// reopened meanwhile is seen open by the listing, or read on its own when
// its webhook's snapshot is not listed yet.
func (rc *repoController) readUnlisted(ctx context.Context, o *observation, withEnv []int, hints map[int]bool) error {
	log := rc.log.WithValues("repository", o.repo)
	var rle *provider.RateLimitError
	read := func(n int, hinted bool) (provider.PullRequest, bool, error) {
		if _, isOpen := o.openBy[n]; isOpen {
			return provider.PullRequest{}, false, nil
		}
		if _, isClosed := o.closed[n]; isClosed {
			return provider.PullRequest{}, false, nil
		}
		pr, err := o.forge.source.GetPullRequest(ctx, o.forge.path, n)
		switch {
		case hinted && errors.Is(err, provider.ErrNotFound):
			return pr, false, nil
		case err != nil:
			return pr, false, err
		}
		return pr, true, nil
	}
	keep := func(pr provider.PullRequest) {
		if pr.Open() {
			// The listing disagreed (stale or truncated): trust the pull
			// request read on its own.
			o.openBy[pr.Number] = pr
			o.open = append(o.open, pr)
			return
		}
		o.closed[pr.Number] = pr
	}
	for _, n := range withEnv {
		pr, ok, err := read(n, false)
		if err != nil {
			log.Error(err, "Pull request state unknown; keeping its environment", "pullRequest", n)
			if errors.As(err, &rle) {
				return err
			}
		}
		if ok {
			keep(pr)
		}
	}
	for n := range hints {
		pr, ok, err := read(n, true)
		if err != nil {
			// Kept for the retry of this repository.
			o.rs.putPending(time.Time{}, map[int]bool{n: true})
			if errors.As(err, &rle) {
				return err
			}
			o.errs = append(o.errs, fmt.Errorf("read pull request %s#%d: %w", o.repo, n, err))
		}
		if ok {
			keep(pr)
		}
	}
	return nil
}
