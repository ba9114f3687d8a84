// Package syncer is sync's engine. It keeps the config repository's current
// revision, turns webhooks and periodic resyncs into per-repository
// reconciles (one at a time per repository, through a work queue), writes
// EphemeralEnvironments and SharedWorkloads with server-side apply, and
// drives the feedback on pull requests from the environments' status.
//
// Deletion safety is structural: a repository whose open pull requests could
// not be listed is not reconciled at all, and render.Decide deletes only on
// evidence read successfully from GitHub (a closed or merged pull request,
// or an open one that no longer matches).
//
// sync runs as a controller-runtime manager (manager.go). With
// Options.LeaderElection several replicas run side by side: each serves
// webhooks and the read API, the one holding the manager's Lease acts; the
// others record the webhooks they receive on the repositories' Repository
// objects, which the leader's repository controller watches (refresh.go).
package syncer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/internal/redact"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/resolve"
	"github.com/petri-dev/petri/sync/webhook"
)

// ConfigSource yields the config repository's current files.
type ConfigSource interface {
	Fetch(ctx context.Context) (*configrepo.Snapshot, error)
}

// Options configure a Syncer.
type Options struct {
	// RESTConfig reaches the API server; Scheme must know Petri's types.
	RESTConfig *rest.Config
	Scheme     *runtime.Scheme
	// Namespace is the management namespace everything is written to.
	Namespace string
	// Provider is GitHub in all three of its roles. PullRequests,
	// Reporter and Commands, where set, stand in for one role of it.
	Provider     provider.Provider
	PullRequests provider.PullRequestSource
	Reporter     provider.Reporter
	Commands     provider.CommandReader
	// Forges are the other forges sync serves, by the name applications
	// give them (config.ForgeGitea, ...), each in its three roles. An
	// application on a forge that is neither here nor GitHub is a config
	// error (config.DropUnserved).
	Forges   map[string]provider.Provider
	Resolver *resolve.Resolver
	Config   ConfigSource
	// ConfigRepository is the config repository's GitHub owner/name or URL;
	// a push webhook for it triggers an immediate fetch.
	ConfigRepository string
	Metrics          *metrics.Metrics
	Log              logr.Logger

	// ConfigInterval is how often the config repository is fetched.
	ConfigInterval time.Duration
	// ResyncInterval is how often every repository is listed again.
	ResyncInterval time.Duration
	// Workers reconcile repositories in parallel (one repository at a time
	// each: the repository controller's workers); 4 when zero.
	Workers int
	// EventQueue bounds the accepted, unprocessed webhooks; 1024 when zero.
	EventQueue int
	// ReconcileTimeout bounds one repository reconcile; 2m when zero.
	ReconcileTimeout time.Duration
	// Clock tells the time of expiry, sleep, commands and snapshots, and
	// times the work queues and loops; the real one when nil.
	Clock clock.WithTicker
	// LeaderElection, when set, makes this Syncer one of several replicas:
	// only the holder of the manager's Lease writes and reports. Nil: it
	// acts alone, at once.
	LeaderElection *LeaderElection
}

// Syncer is sync's engine.
type Syncer struct {
	opts   Options
	log    logr.Logger
	client client.Client
	cache  cache.Cache
	// mgr runs everything (manager.go); lock is its Lease, with leader
	// election only.
	mgr  manager.Manager
	lock resourcelock.Interface
	// refresh reads and writes the Repositories webhooks are recorded on
	// (refresh.go); with leader election only.
	refresh *refresher

	// forges are the roles of each forge served (forges.go): what the
	// pass lists and reads, what feedback reports, what commands are read
	// from, on the forge of each repository.
	forges provider.Registry

	events chan webhook.Event
	// queue is the repository controller's work queue, by repository key.
	queue         workqueue.TypedRateLimitingInterface[string]
	feedback      workqueue.TypedRateLimitingInterface[prKey]
	configTrigger chan struct{}

	// store keeps each pull request's lifecycle state (statestore.go).
	store stateStore
	clock clock.WithTicker

	// mu guards the config, the map of repositories (each repoState has a
	// lock of its own) and the applications' status.
	mu         sync.Mutex
	cfg        *config.Config
	repos      map[string]*repoState
	appStatus  map[string]*appStatus
	cacheReady bool
	// fileRepos is the repository of the application each config file
	// held when it was last whole ("" for a shared workload's file): a
	// broken file stands for it (stateprune.go).
	fileRepos map[string]string
	// writes are sync's own writes of environments its cache does not
	// show yet (listEnvironments).
	writes ownWrites
	// wakes is when the read API last wrote each environment's wake
	// request (by UID), for WakeEvery while the cache may not show it.
	wakes     sync.Map
	configErr error

	// leadMu guards leadCtx, the context of the current leadership (nil
	// while this replica does not lead), and stopped (Start is returning:
	// no part starts any more). leadWork counts the writes running under
	// the leadership, which ends only after they have returned; running
	// counts the parts the manager runs.
	leadMu   sync.Mutex
	leadCtx  context.Context
	stopped  bool
	leadWork sync.WaitGroup
	running  sync.WaitGroup
	// fullResync makes the next config load apply everything and queue
	// every repository, even when the revision did not change: the first
	// thing a new leader does.
	fullResync atomic.Bool
	// prLocks serialise the work on one pull request's comment (lockPR).
	prLocks [prLockStripes]sync.Mutex
}

type appStatus struct {
	LastReconcile time.Time
	LastError     string
	Kept          []string
}

// New builds a Syncer; Start runs it.
func New(opts Options) (*Syncer, error) {
	forges, err := registry(opts)
	if err != nil {
		return nil, err
	}
	if opts.Namespace == "" || opts.Config == nil || opts.RESTConfig == nil || opts.Scheme == nil {
		return nil, errors.New("syncer: namespace, config source, REST config and scheme are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Resolver == nil {
		opts.Resolver = &resolve.Resolver{}
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New()
	}
	if opts.ConfigInterval == 0 {
		opts.ConfigInterval = time.Minute
	}
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = 5 * time.Minute
	}
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	if opts.EventQueue == 0 {
		opts.EventQueue = 1024
	}
	if opts.ReconcileTimeout == 0 {
		opts.ReconcileTimeout = 2 * time.Minute
	}
	cacheOpts := cache.Options{
		Scheme:               opts.Scheme,
		DefaultNamespaces:    map[string]cache.Config{opts.Namespace: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: render.ManagedBy}),
	}
	if opts.LeaderElection != nil {
		le, err := opts.LeaderElection.withDefaults()
		if err != nil {
			return nil, err
		}
		opts.LeaderElection = le
		cacheOpts.ByObject = map[client.Object]cache.ByObject{
			&petriv1.Repository{}: {Namespaces: map[string]cache.Config{le.Namespace: {}}},
		}
	}
	// Errors of forges, repositories and registries are logged: never
	// with their credentials.
	opts.Log = redact.Logger(opts.Log)
	c, err := client.New(opts.RESTConfig, client.Options{Scheme: opts.Scheme})
	if err != nil {
		return nil, err
	}
	mgr, lock, err := newManager(opts, cacheOpts)
	if err != nil {
		return nil, err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &petriv1.EphemeralEnvironment{}, indexPullRequest, pullRequestIndex); err != nil {
		return nil, fmt.Errorf("index environments by pull request: %w", err)
	}
	s := &Syncer{
		opts:          opts,
		log:           opts.Log,
		client:        c,
		cache:         mgr.GetCache(),
		mgr:           mgr,
		lock:          lock,
		forges:        forges,
		events:        make(chan webhook.Event, opts.EventQueue),
		queue:         workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Clock: opts.Clock}),
		feedback:      workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[prKey](), workqueue.TypedRateLimitingQueueConfig[prKey]{Clock: opts.Clock}),
		configTrigger: make(chan struct{}, 1),
		store:         newClusterStore(&prstate.Store{Client: c, Namespace: opts.Namespace}, func(key string) provider.Reporter { return forges.Lookup(forgeOf(key)).Reporter }),
		clock:         opts.Clock,
		repos:         map[string]*repoState{},
		appStatus:     map[string]*appStatus{},
	}
	if le := opts.LeaderElection; le != nil {
		s.refresh = &refresher{client: c, cache: s.cache, namespace: le.Namespace, metrics: opts.Metrics, log: s.log}
	}
	return s, s.setup()
}

// setup adds the Syncer's parts to its manager: the environment cache's
// handlers, what every replica runs (the config, webhooks), what only the
// leader runs, and the repository controller.
func (s *Syncer) setup() error {
	inf, err := s.cache.GetInformer(context.Background(), &petriv1.EphemeralEnvironment{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { s.envChanged(o) },
		UpdateFunc: func(old, o any) {
			s.envChanged(o)
			s.envLifecycleChanged(old, o)
		},
		DeleteFunc: func(o any) {
			s.envChanged(o)
			s.envGone(o)
		},
	}); err != nil {
		return err
	}
	if err := s.mgr.Add(runnable{s: s, run: s.serve}); err != nil {
		return err
	}
	if err := s.mgr.Add(runnable{s: s, leader: true, run: s.lead}); err != nil {
		return err
	}
	repos, err := controller.NewTyped("petri-sync-repositories", s.mgr, controller.TypedOptions[string]{
		Reconciler:              reconcile.TypedFunc[string](s.reconcile),
		MaxConcurrentReconciles: s.opts.Workers,
		// The queue every part adds repositories to, on the Syncer's clock.
		NewQueue: func(string, workqueue.TypedRateLimiter[string]) workqueue.TypedRateLimitingInterface[string] {
			return s.queue
		},
	})
	if err != nil {
		return err
	}
	if s.refresh != nil {
		return repos.Watch(source.TypedKind(s.cache, &petriv1.Repository{}, marked()))
	}
	return nil
}

// Events is where the webhook handler puts accepted events.
func (s *Syncer) Events() chan<- webhook.Event { return s.events }

// serve is what every replica runs once the cache is synced: the config
// loop and the webhook intake.
func (s *Syncer) serve(ctx context.Context) {
	if !s.cache.WaitForCacheSync(ctx) {
		return
	}
	s.mu.Lock()
	s.cacheReady = true
	s.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.configLoop(ctx) })
	s.eventLoop(ctx)
}

// Ready is nil once the environment cache is synced and a config revision
// is loaded.
func (s *Syncer) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.cacheReady:
		return errors.New("environment cache not synced")
	case s.cfg == nil && s.configErr != nil:
		// The answer of /readyz, which anyone may read.
		return fmt.Errorf("config repository not loaded: %w", redact.Error(s.configErr))
	case s.cfg == nil:
		return errors.New("config repository not loaded yet")
	}
	return nil
}

// repo returns the state of a repository, creating it; only for
// repositories of the current config. Readers use s.repos directly. The
// caller holds s.mu.
func (s *Syncer) repo(key string) *repoState {
	r := s.repos[key]
	if r == nil {
		r = newRepoState(key)
		s.repos[key] = r
	}
	return r
}

// configuredRepo returns the state of a repository of the current config;
// nil for any other.
func (s *Syncer) configuredRepo(key string) *repoState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.configured(key) {
		return nil
	}
	return s.repo(key)
}

// configured reports whether a repository has an application in the
// current config. The caller holds s.mu.
func (s *Syncer) configured(repo string) bool {
	if s.cfg == nil {
		return false
	}
	for _, a := range s.cfg.Applications {
		if a.RepositoryKey() == repo {
			return true
		}
	}
	return false
}

// forgetRepo drops everything remembered of a repository that left the
// config. The caller holds s.mu.
func (s *Syncer) forgetRepo(repo string) {
	delete(s.repos, repo)
	for _, f := range s.forges.Forgetters(forgeOf(repo)) {
		f.ForgetRepository(pathOf(repo))
	}
}

// forgetPullRequest drops a closed pull request's state once its last
// feedback is posted, unless it was found open again meanwhile.
func (s *Syncer) forgetPullRequest(key prKey) {
	s.mu.Lock()
	rs := s.repos[key.Repo]
	s.mu.Unlock()
	if rs == nil || !rs.forgetPullRequest(key.Number) {
		return
	}
	for _, f := range s.forges.Forgetters(forgeOf(key.Repo)) {
		f.ForgetPullRequest(pathOf(key.Repo), key.Number)
	}
}

// stateSize counts what the in-memory maps hold; every entry belongs to an
// open pull request or a repository of the current config, so these stay
// bounded by what is open.
type stateSize struct {
	Repositories, Snapshots, Hints, PullRequests, Gates, Statuses, Applications int
	// Lives are pull requests whose lifecycle state is held, Commands the
	// command comments waiting.
	Lives, Commands int
}

func (s *Syncer) stateSize() stateSize {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := stateSize{Repositories: len(s.repos), Applications: len(s.appStatus)}
	for _, rs := range s.repos {
		rs.mu.Lock()
		n.Gates += len(rs.gates)
		n.Statuses += len(rs.statuses)
		n.Snapshots += len(rs.snapshots)
		n.Hints += len(rs.hints)
		n.PullRequests += len(rs.prs)
		n.Lives += len(rs.life)
		for _, cs := range rs.commands {
			n.Commands += len(cs)
		}
		n.Hints += len(rs.commentHints)
		rs.mu.Unlock()
	}
	return n
}
