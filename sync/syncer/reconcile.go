// Reconcile: the repository controller, keyed by repository, one pass at a
// time per repository, each pass one way through observe.go, commands.go,
// lifecycle.go, plan.go and act.go.

package syncer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
)

// reconcile is the repository controller's: the marks waiting on the
// repository's Repository (refresh.go), then one pass. A forge's rate
// limit waits for its reset; any other error is retried with back-off, and
// nothing was deleted.
func (s *Syncer) reconcile(ctx context.Context, key string) (reconcile.Result, error) {
	if ctx.Err() != nil {
		// The leadership ended: what is left in the queue is not acted on.
		return reconcile.Result{}, nil
	}
	s.takeMarks(ctx, key)
	start := s.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
	err := s.reconcileRepo(rctx, key)
	cancel()
	s.opts.Metrics.ReconcileDuration.Observe(s.clock.Since(start).Seconds())
	var rle *provider.RateLimitError
	switch {
	case err == nil:
		s.opts.Metrics.Reconciles.WithLabelValues("success").Inc()
		return reconcile.Result{}, nil
	case errors.As(err, &rle):
		s.opts.Metrics.Reconciles.WithLabelValues("rate_limited").Inc()
		s.log.Info("Forge rate limit: nothing changed, retrying after the reset", "repository", key, "until", rle.Until)
		return reconcile.Result{RequeueAfter: rle.Until.Sub(s.clock.Now()) + time.Second}, nil
	default:
		s.opts.Metrics.Reconciles.WithLabelValues("error").Inc()
		return reconcile.Result{}, fmt.Errorf("reconciling repository %s failed; nothing was deleted, retrying: %w", key, err)
	}
}

func (s *Syncer) appsFor(repo string) []*config.Application {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg == nil {
		return nil
	}
	var out []*config.Application
	for _, a := range s.cfg.Applications {
		if a.RepositoryKey() == repo {
			out = append(out, a)
		}
	}
	return out
}

// setAppError records a pass of applications that failed before their
// plan (err) or ended without an error (nil).
func (s *Syncer) setAppError(apps []*config.Application, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range apps {
		s.appStatusOf(a.Name).record(s.clock.Now(), err)
	}
}

// appStatusOf returns an application's status, creating it. The caller
// holds s.mu.
func (s *Syncer) appStatusOf(name string) *appStatus {
	st := s.appStatus[name]
	if st == nil {
		st = &appStatus{}
		s.appStatus[name] = st
	}
	return st
}

func (st *appStatus) record(at time.Time, err error) {
	st.LastReconcile = at
	st.LastError = ""
	if err != nil {
		st.LastError = err.Error()
	}
}

// reconcileRepo brings the environments of every application of one
// repository to the desired state, in one way through: observe (the pull
// requests, the environments, each pull request's lifecycle state), the
// commands people wrote, the lifecycle moved on to now, decide (a pure
// plan), act.
func (s *Syncer) reconcileRepo(ctx context.Context, repo string) error {
	apps := s.appsFor(repo)
	rs := s.configuredRepo(repo)
	if len(apps) == 0 || rs == nil {
		// Left the config: whatever was remembered of it goes.
		s.mu.Lock()
		s.forgetRepo(repo)
		s.mu.Unlock()
		return nil
	}
	o, err := s.observe(ctx, rs, apps)
	if err != nil {
		return err
	}
	defer func() {
		switch {
		case o.resynced:
			s.opts.Metrics.Resyncs.WithLabelValues("done").Inc()
		case o.resync:
			s.opts.Metrics.Resyncs.WithLabelValues("failed").Inc()
		}
	}()
	if err := s.runCommands(ctx, o); err != nil {
		return err
	}
	held, err := s.lifecycle(ctx, o)
	if err != nil {
		return err
	}
	return s.carryOut(ctx, o, decide(o, held, rs.lives(o.openBy), s.clock.Now()))
}
