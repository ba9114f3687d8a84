// Observe: the first part of a repository's pass. It gathers what the plan
// is decided on without holding a lock across any call to the forge or the
// API server, in steps each in its own file: the open pull requests,
// webhook snapshots merged in, and closed ones confirmed one by one
// (listing.go), the environments sync wrote (envlist.go), who stands behind
// each pull request (trust.go), each pull request's lifecycle state
// (statestore.go).

package syncer

import (
	"context"
	"slices"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
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

// observe gathers a repository's inputs, one after the other: the open
// pull requests (listing.go), sync's environments (envlist.go), the pull
// requests read on their own (listing.go), who stands behind them
// (trust.go), and the lifecycle state of those of interest
// (statestore.go). An error stops the pass before anything is written or
// deleted: a failed listing means "unknown", never "none".
func (rc *repoController) observe(ctx context.Context, o *observation) (err error) {
	o.forge, o.closed, o.unknown = rc.forges.of(o.repo), map[int]provider.PullRequest{}, map[int]bool{}
	defer func() {
		if err != nil && o.resync {
			// Not answered: the pass that retries answers it.
			o.rs.mu.Lock()
			o.rs.resyncDue = true
			o.rs.mu.Unlock()
			rc.metrics.Resyncs.WithLabelValues("failed").Inc()
		}
	}()
	hints, err := rc.listPullRequests(ctx, o)
	if err != nil {
		rc.memory.setAppError(o.apps, err)
		return err
	}
	live, err := rc.environments(ctx, o)
	if err != nil {
		rc.memory.setAppError(o.apps, err)
		return err
	}
	if err := rc.readUnlisted(ctx, o, live, hints); err != nil {
		return err
	}
	if err := rc.trust.readTrust(ctx, o); err != nil {
		rc.memory.setAppError(o.apps, err)
		return err
	}
	return rc.readLives(ctx, o)
}
