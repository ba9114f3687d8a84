// The config loop: every replica fetches the config repository on a ticker
// or when asked (a push to it), for the read API and to know which webhooks
// matter; the leader applies each new revision (the shared workloads, the
// states of repositories that left it pruned, every repository queued) and
// resyncs every repository periodically.

package syncer

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/render"
)

// configLoader keeps the config repository's current revision in memory
// and, under the leadership, applies it.
type configLoader struct {
	source ConfigSource
	memory *memory
	lead   *leadership
	writer *writer
	store  stateStore
	// cache and namespace are where the environments of an application
	// whose file is broken are found (pruneStates).
	cache     cache.Cache
	namespace string
	queue     workqueue.TypedRateLimitingInterface[string]
	forges    forgeSet
	triggered chan struct{}
	// fullResync makes the next config load apply everything and queue
	// every repository, even when the revision did not change: the first
	// thing a new leader does.
	fullResync atomic.Bool
	// interval is the config fetch's, resyncInterval the resync's;
	// timeout bounds applying a revision like a pass.
	interval, resyncInterval, timeout time.Duration
	clock                             clock.WithTicker
	metrics                           *metrics.Metrics
	log                               logr.Logger
}

// trigger asks for a fetch of the config repository now.
func (c *configLoader) trigger() {
	select {
	case c.triggered <- struct{}{}:
	default:
	}
}

func (c *configLoader) run(ctx context.Context) {
	t := c.clock.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.load(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-c.triggered:
		}
	}
}

// loadConfig fetches the config repository and keeps its current revision.
// Every replica does, for the read API and to know which events matter;
// only the leader applies it: the shared workloads are written and every
// repository is queued when the revision changed, or when a full resync is
// due (a new leader), even with the last revision when the fetch fails.
func (c *configLoader) load(ctx context.Context) {
	// The full load a new leader asks for is done only by a load that
	// applies as the leader (asLeader below clears it): one that started
	// before the leadership leaves it to the next.
	full := c.fullResync.Load()
	snap, err := c.source.Fetch(ctx)
	var cfg, prev *config.Config
	var old []string
	if err != nil {
		c.log.Error(err, "Fetching the config repository failed; keeping the last revision")
		cfg = c.memory.fetchFailed(err)
		if !full || cfg == nil {
			// Without any revision a new leader's full resync waits for the
			// first one, which is applied as a change anyway.
			return
		}
		old = cfg.Repositories()
	} else {
		var same bool
		cfg, same = c.memory.fetched(snap.Revision)
		if same && !full {
			return
		}
		prev = cfg
		if same {
			old = cfg.Repositories()
		} else {
			cfg, old = c.setConfig(snap)
		}
	}
	c.lead.asLeader(func(ctx context.Context) {
		c.fullResync.Store(false)
		// Bounded like a reconcile, so that a chart repository or an API
		// server that does not answer cannot hold up the config loop.
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		err := c.writer.applySharedWorkloads(actx, cfg)
		cancel()
		if err != nil {
			c.log.Error(err, "Applying shared workloads failed")
		}
		pctx, cancel := context.WithTimeout(ctx, c.timeout)
		if err := c.pruneStates(pctx, cfg, prev); err != nil {
			c.log.Error(err, "Pruning the pull-request states of repositories that left the config failed; trying again at the next revision")
		}
		cancel()
		for _, r := range append(old, cfg.Repositories()...) {
			c.queue.Add(r)
		}
	})
}

// setConfig parses and keeps a new revision; it returns it and the
// repositories of the one before.
func (c *configLoader) setConfig(snap *configrepo.Snapshot) (*config.Config, []string) {
	cfg := config.Load(snap.Files)
	cfg.Revision = snap.Revision
	// An application on a forge sync has no credentials for is an error
	// of its file; the others run.
	cfg.DropUnserved(c.forges.Serves)
	for _, e := range cfg.Errors {
		c.log.Error(e, "Config file has an error; its application is left as it was", "revision", snap.Revision)
	}
	c.metrics.ConfigErrors.Set(float64(len(cfg.Errors)))
	// What belonged to repositories and applications that left the config
	// is forgotten; their environments are left as they are.
	old, gone := c.memory.replace(cfg)
	for _, name := range gone {
		c.metrics.Environments.DeleteLabelValues(name)
	}
	c.log.Info("Loaded config revision", "revision", snap.Revision, "applications", len(cfg.Applications), "sharedWorkloads", len(cfg.SharedWorkloads), "errors", len(cfg.Errors))
	return cfg, old
}

func (c *configLoader) resyncLoop(ctx context.Context) {
	t := c.clock.NewTicker(c.resyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		c.resync()
	}
}

// resync enqueues every repository now, as the periodic resync does: each
// lists its open pull requests and, for commands whose webhook never
// arrived, its recent comments.
func (c *configLoader) resync() {
	for _, r := range c.memory.resyncAll() {
		c.queue.Add(r)
	}
}

// pruneStates deletes the states of repositories that left cfg; prev is
// the revision before (nil when there was none).
func (c *configLoader) pruneStates(ctx context.Context, cfg, prev *config.Config) error {
	keep := map[string]bool{}
	for _, r := range cfg.Repositories() {
		keep[r] = true
	}
	fileRepos := c.memory.fileRepositories()
	held := map[string]bool{}
	for file, name := range cfg.BrokenFiles {
		repo, known := fileRepos[file]
		if name == "" && !known {
			c.log.Info("A broken config file names nothing; keeping every pull-request state until it does", "file", file)
			return nil
		}
		if name != "" {
			held[name] = true
		}
		if repo != "" {
			keep[repo] = true
		}
	}
	if len(held) > 0 {
		if prev != nil {
			for _, a := range prev.Applications {
				if held[a.Name] {
					keep[a.RepositoryKey()] = true
				}
			}
		}
		var envs petriv1.EphemeralEnvironmentList
		if err := c.cache.List(ctx, &envs, client.InNamespace(c.namespace)); err != nil {
			return err
		}
		for i := range envs.Items {
			e := &envs.Items[i]
			if render.Owned(e.Labels) && held[e.Labels[render.LabelApplication]] {
				keep[render.RepositoryKey(e.Annotations)] = true
			}
		}
	}
	n, err := c.store.Prune(ctx, func(repo string) bool { return keep[repo] })
	if n > 0 {
		c.log.Info("Forgot the pull-request states of repositories that left the config", "states", n)
	}
	return err
}
