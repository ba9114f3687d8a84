// Observe: the first part of a repository's pass. It gathers what the plan
// is decided on (the open pull requests, webhook snapshots merged in, closed
// ones confirmed one by one, the environments sync wrote, each pull
// request's lifecycle state) without holding a lock across any call to the
// forge or the API server.

package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// observation is what one pass over a repository saw.
type observation struct {
	repo string
	rs   *repoState
	// forge is the repository's path and roles on its forge.
	forge repoForge
	apps  []*config.Application
	// since is when the oldest webhook this pass answers arrived.
	since time.Time
	// open are the open pull requests, openBy the same by number; closed
	// are pull requests with an environment or a hint, read as closed.
	open   []provider.PullRequest
	openBy map[int]provider.PullRequest
	closed map[int]provider.PullRequest
	// envs are sync's environments per application and pull request.
	envs map[string]map[int]*petriv1.EphemeralEnvironment
	// interest are the open pull requests that an application matches or
	// that have an environment, in order.
	interest []int
	// unknown are pull requests whose lifecycle state could not be read:
	// nothing is written or deleted for them this pass.
	unknown map[int]bool
	// errs are what failed without stopping the pass.
	errs []error
	// resync is set when the pass answers a resync (takePending): it lists
	// and reads the repository's comments; resynced once it has.
	resync, resynced bool
}

// envsOf returns a pull request's environments by application.
func (o *observation) envsOf(n int) map[string]*petriv1.EphemeralEnvironment {
	out := map[string]*petriv1.EphemeralEnvironment{}
	for app, by := range o.envs {
		if e := by[n]; e != nil {
			out[app] = e
		}
	}
	return out
}

// interested tells whether a pull request is one of o.interest.
func (o *observation) interested(n int) bool {
	_, found := slices.BinarySearch(o.interest, n)
	return found
}

// observe gathers a repository's inputs. An error stops the pass before
// anything is written or deleted: a failed listing means "unknown", never
// "none".
func (rc *repoController) observe(ctx context.Context, rs *repoState, apps []*config.Application) (_ *observation, err error) {
	o := &observation{repo: rs.name, rs: rs, forge: rc.forges.of(rs.name), apps: apps, closed: map[int]provider.PullRequest{}, unknown: map[int]bool{}}
	since, hints, resync := rs.takePending()
	o.since, o.resync = since, resync
	defer func() {
		if err != nil && resync {
			// Not answered: the pass that retries answers it.
			rs.mu.Lock()
			rs.resyncDue = true
			rs.mu.Unlock()
			rc.metrics.Resyncs.WithLabelValues("failed").Inc()
		}
	}()
	listed, err := rc.listOpen(ctx, rs, o.forge, len(hints) > 0 || resync)
	if err != nil {
		rc.memory.setAppError(apps, err)
		rs.putPending(since, hints)
		return nil, err
	}
	var unlistedSnapshots []int
	o.open, unlistedSnapshots = rs.mergeSnapshots(listed, rc.clock.Now())
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
	var envs petriv1.EphemeralEnvironmentList
	if err := rc.writer.listEnvironments(ctx, apps, &envs); err != nil {
		rc.memory.setAppError(apps, err)
		return nil, fmt.Errorf("list environments: %w", err)
	}
	o.envs = map[string]map[int]*petriv1.EphemeralEnvironment{}
	for _, app := range apps {
		o.envs[app.Name] = map[int]*petriv1.EphemeralEnvironment{}
	}
	// live are the pull requests not listed as open with an environment
	// that is not being deleted: only those are read on their own.
	live := map[int]bool{}
	for i := range envs.Items {
		e := &envs.Items[i]
		by := o.envs[e.Labels[render.LabelApplication]]
		if by == nil || !render.Owned(e.Labels) || render.RepositoryKey(e.Annotations) != o.repo {
			continue
		}
		n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
		by[n] = e
		if _, isOpen := o.openBy[n]; !isOpen && n != 0 && e.DeletionTimestamp == nil {
			live[n] = true
		}
	}
	if err := rc.readUnlisted(ctx, o, slices.Sorted(maps.Keys(live)), hints); err != nil {
		return nil, err
	}
	if err := rc.trust.readTrust(ctx, o); err != nil {
		rc.memory.setAppError(apps, err)
		return nil, err
	}
	o.interest = interest(apps, o.openBy, o.envs)
	return o, rc.readLives(ctx, o)
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

// interest returns, in order, the open pull requests that an application
// matches or that have an environment of it.
func interest(apps []*config.Application, openBy map[int]provider.PullRequest, envs map[string]map[int]*petriv1.EphemeralEnvironment) []int {
	var out []int
	for n, pr := range openBy {
		for _, app := range apps {
			if envs[app.Name][n] != nil || app.Matches(view(pr)).Match {
				out = append(out, n)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// readLives reads the lifecycle state of every pull request of interest
// from the store (once; then it is remembered). A pull request whose state
// could not be read is unknown for this pass; a rate limit stops it.
func (rc *repoController) readLives(ctx context.Context, o *observation) error {
	var rle *provider.RateLimitError
	for _, n := range o.interest {
		unlock := rc.lives.lockPR(prKey{o.repo, n})
		_, err := rc.lives.ensureLife(ctx, o.rs, prKey{o.repo, n})
		unlock()
		if err != nil {
			if errors.As(err, &rle) {
				return err
			}
			o.unknown[n] = true
			o.errs = append(o.errs, fmt.Errorf("pull request %s#%d: %w", o.repo, n, err))
		}
	}
	return nil
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

// takePending takes the oldest unprocessed webhook's time and the handed
// over pull requests for a pass; putPending gives them back to a pass that
// could not list.
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
