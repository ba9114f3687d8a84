// Reconcile: the repository controller, keyed by repository, one pass at a
// time per repository, each pass one way through memory.go (passOver),
// observe.go, commands.go, lifecycle.go, plan.go and act.go.

package syncer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
)

// repoController is the repository controller: one pass at a time per
// repository, each on what it is handed here rather than on the Syncer.
// feedbackLocked is the feedback of a pull request whose lock the caller
// holds (feedback.go), refresh the Repositories marks are taken from
// (nil without leader election), triggerConfig asks for a config fetch.
type repoController struct {
	memory         *memory
	forges         forgeSet
	lives          *lives
	writer         *writer
	trust          *trustReader
	commands       *commander
	refresh        *refresher
	queue          workqueue.TypedRateLimitingInterface[string]
	feedback       workqueue.TypedRateLimitingInterface[prKey]
	feedbackLocked func(ctx context.Context, key prKey) error
	triggerConfig  func()
	clock          clock.Clock
	metrics        *metrics.Metrics
	log            logr.Logger
	// timeout bounds one pass; resyncInterval is the periodic resync's.
	timeout, resyncInterval time.Duration
}

// reconcile is the repository controller's: the marks waiting on the
// repository's Repository (refresh.go), then one pass. A forge's rate
// limit waits for its reset; any other error is retried with back-off, and
// nothing was deleted.
func (rc *repoController) reconcile(ctx context.Context, key string) (reconcile.Result, error) {
	if ctx.Err() != nil {
		// The leadership ended: what is left in the queue is not acted on.
		return reconcile.Result{}, nil
	}
	rc.takeMarks(ctx, key)
	start := rc.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, rc.timeout)
	err := rc.reconcileRepo(rctx, key)
	cancel()
	rc.metrics.ReconcileDuration.Observe(rc.clock.Since(start).Seconds())
	var rle *provider.RateLimitError
	switch {
	case err == nil:
		rc.metrics.Reconciles.WithLabelValues("success").Inc()
		return reconcile.Result{}, nil
	case errors.As(err, &rle):
		rc.metrics.Reconciles.WithLabelValues("rate_limited").Inc()
		rc.log.Info("Forge rate limit: nothing changed, retrying after the reset", "repository", key, "until", rle.Until)
		return reconcile.Result{RequeueAfter: rle.Until.Sub(rc.clock.Now()) + time.Second}, nil
	default:
		rc.metrics.Reconciles.WithLabelValues("error").Inc()
		return reconcile.Result{}, fmt.Errorf("reconciling repository %s failed; nothing was deleted, retrying: %w", key, err)
	}
}

// takeMarks is the leader's side, at the start of a repository's pass: the
// marks on its Repository go into the repository's state (and a config
// fetch, when one is asked for).
func (rc *repoController) takeMarks(ctx context.Context, key string) {
	if rc.refresh == nil {
		return
	}
	rs := rc.memory.configuredRepo(key)
	taken := rc.refresh.take(ctx, key, rs != nil)
	if rs != nil {
		rs.take(taken)
		for _, n := range rs.takeGroupMarks(taken) {
			rc.feedback.Add(prKey{key, n})
		}
	}
	if hasMark(taken, markConfig) {
		rc.triggerConfig()
	}
}

// reconcileRepo brings the environments of every application of one
// repository to the desired state, in one way through: the repository's
// applications and state (memory.go), observe (the pull requests, the
// environments, each pull request's lifecycle state), the commands people
// wrote, the lifecycle moved on to now, decide (a pure plan), act (the
// writes, then the feedback each pull request it touched is due).
func (rc *repoController) reconcileRepo(ctx context.Context, repo string) error {
	o := rc.memory.passOver(repo)
	if o == nil {
		return nil
	}
	if err := rc.observe(ctx, o); err != nil {
		return err
	}
	defer func() {
		switch {
		case o.resynced:
			rc.metrics.Resyncs.WithLabelValues("done").Inc()
		case o.resync:
			rc.metrics.Resyncs.WithLabelValues("failed").Inc()
		}
	}()
	if err := rc.commands.runCommands(ctx, o); err != nil {
		return err
	}
	held, err := rc.lifecycle(ctx, o)
	if err != nil {
		return err
	}
	p := decide(o, held, o.rs.lives(o.openBy), rc.clock.Now())
	return rc.carryOut(ctx, o, p)
}
