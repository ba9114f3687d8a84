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
	// CommentPatience is how long a commit status or a pull request's
	// comment whose state is on its way (deploying, tearing down) waits
	// for it to settle before it is written all the same; settled states
	// are written at once (budget.go). DefaultCommentPatience when zero.
	CommentPatience time.Duration
	// Clock tells the time of expiry, sleep, commands and snapshots, and
	// times the work queues and loops; the real one when nil.
	Clock clock.WithTicker
	// LeaderElection, when set, makes this Syncer one of several replicas:
	// only the holder of the manager's Lease writes and reports. Nil: it
	// acts alone, at once.
	LeaderElection *LeaderElection
}

// Syncer is sync's engine: the parts below, each with what it needs, wired
// together and run by one manager. The feedback on pull requests
// (feedback.go, deployments.go) still runs on the Syncer itself.
type Syncer struct {
	opts   Options
	log    logr.Logger
	client client.Client
	cache  cache.Cache
	clock  clock.WithTicker
	// mgr runs everything (manager.go).
	mgr manager.Manager

	events chan webhook.Event
	// queue is the repository controller's work queue, by repository key;
	// feedback the feedback workers', by pull request.
	queue    workqueue.TypedRateLimitingInterface[string]
	feedback workqueue.TypedRateLimitingInterface[prKey]
	// writes are sync's own writes of environments its cache does not
	// show yet (envlist.go).
	writes *ownWrites
	// budget holds back the writes on pull requests that are not due
	// yet (budget.go).
	budget *writeBudget

	// The parts the feedback shares: the forges' roles, the memory of
	// the config and its repositories, whether this replica leads, the
	// pull requests' lifecycle states and the merge queue.
	forgeSet
	*memory
	*leadership
	*lives
	*mergeQueue

	// config is the config loop (configloop.go), intake the webhooks'
	// (intake.go), pass the repository controller (reconcile.go), views
	// the read API's (views.go).
	config *configLoader
	intake *intake
	pass   *repoController
	views  *views
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
	return wire(opts, forgeSet{forges}, c, mgr, lock)
}

// wire builds the Syncer's parts, each handed what it needs, and adds
// them to the manager.
func wire(opts Options, forges forgeSet, c client.Client, mgr manager.Manager, lock resourcelock.Interface) (*Syncer, error) {
	s := &Syncer{
		opts:     opts,
		log:      opts.Log,
		client:   c,
		cache:    mgr.GetCache(),
		clock:    opts.Clock,
		mgr:      mgr,
		events:   make(chan webhook.Event, opts.EventQueue),
		queue:    workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Clock: opts.Clock}),
		feedback: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[prKey](), workqueue.TypedRateLimitingQueueConfig[prKey]{Clock: opts.Clock}),
		writes:   &ownWrites{},
		forgeSet: forges,
		memory:   newMemory(forges, opts.Clock),
	}
	s.budget = newWriteBudget(opts.CommentPatience, &s.memory.mu)
	s.leadership = &leadership{lock: lock, leadMu: &s.memory.mu}
	var refresh *refresher
	if le := opts.LeaderElection; le != nil {
		refresh = &refresher{client: c, cache: s.cache, namespace: le.Namespace, metrics: opts.Metrics, log: s.log}
	}
	store := newClusterStore(&prstate.Store{Client: c, Namespace: opts.Namespace}, forges.reporterOf)
	s.lives = &lives{store: store, forges: forges, memory: s.memory, clock: opts.Clock}
	s.mergeQueue = &mergeQueue{memory: s.memory, refresh: refresh, clock: opts.Clock, log: s.log, post: s.commitStatus}
	w := &writer{client: c, cache: s.cache, namespace: opts.Namespace, resolver: opts.Resolver, writes: s.writes, forges: forges,
		clock: opts.Clock, metrics: opts.Metrics, log: s.log}
	s.config = &configLoader{source: opts.Config, memory: s.memory, lead: s.leadership, writer: w, store: store, cache: s.cache,
		namespace: opts.Namespace, queue: s.queue, forges: forges, triggered: make(chan struct{}, 1), interval: opts.ConfigInterval,
		resyncInterval: opts.ResyncInterval, timeout: opts.ReconcileTimeout, clock: opts.Clock, metrics: opts.Metrics, log: s.log}
	s.intake = &intake{events: s.events, memory: s.memory, lead: s.leadership, refresh: refresh, queue: s.queue, feedback: s.feedback,
		triggerConfig: s.config.trigger, configRepository: opts.ConfigRepository, clock: opts.Clock, log: s.log}
	s.pass = &repoController{memory: s.memory, forges: forges, lives: s.lives, writer: w, trust: &trustReader{clock: opts.Clock},
		commands: &commander{lives: s.lives, writer: w, feedback: s.feedbackLocked, clock: opts.Clock, metrics: opts.Metrics, log: s.log},
		refresh:  refresh, queue: s.queue, feedback: s.feedback, feedbackLocked: s.feedbackLocked, triggerConfig: s.config.trigger,
		clock: opts.Clock, metrics: opts.Metrics, log: s.log, timeout: opts.ReconcileTimeout, resyncInterval: opts.ResyncInterval}
	s.views = &views{cache: s.cache, namespace: opts.Namespace, memory: s.memory, writer: w, clock: opts.Clock, log: s.log}
	return s, s.setup(refresh != nil)
}

// setup adds the Syncer's parts to its manager: the environment cache's
// handlers, what every replica runs (the config, webhooks), what only the
// leader runs, and the repository controller.
func (s *Syncer) setup(refresh bool) error {
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
	if err := s.mgr.Add(runnable{lead: s.leadership, run: s.serve}); err != nil {
		return err
	}
	if err := s.mgr.Add(runnable{lead: s.leadership, leader: true, run: s.lead}); err != nil {
		return err
	}
	repos, err := controller.NewTyped("petri-sync-repositories", s.mgr, controller.TypedOptions[string]{
		Reconciler:              reconcile.TypedFunc[string](s.pass.reconcile),
		MaxConcurrentReconciles: s.opts.Workers,
		// The queue every part adds repositories to, on the Syncer's clock.
		NewQueue: func(string, workqueue.TypedRateLimiter[string]) workqueue.TypedRateLimitingInterface[string] {
			return s.queue
		},
	})
	if err != nil {
		return err
	}
	if refresh {
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
	s.setCacheReady()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.config.run(ctx) })
	s.intake.eventLoop(ctx)
}

// Ready is nil once the environment cache is synced and a config revision
// is loaded.
func (s *Syncer) Ready() error { return s.ready() }

// TriggerConfigFetch asks for a fetch of the config repository now.
func (s *Syncer) TriggerConfigFetch() { s.config.trigger() }

// Resync enqueues every repository now, as the periodic resync does: each
// lists its open pull requests and, for commands whose webhook never
// arrived, its recent comments.
func (s *Syncer) Resync() { s.config.resync() }

// Cache is sync's informer cache: the EphemeralEnvironments and
// SharedWorkloads sync wrote in the management namespace. The web page
// (sync/ui) reads and watches it rather than opening watches of its own;
// Start starts it.
func (s *Syncer) Cache() cache.Cache { return s.cache }

// Environments lists the environments sync wrote, from the cache.
func (s *Syncer) Environments(ctx context.Context) ([]Environment, error) {
	return s.views.environments(ctx)
}

// Applications reports every application of the current config revision and
// every broken file, whose environments are left as they were.
func (s *Syncer) Applications() (revision string, apps []Application) { return s.applications() }

// Wake asks an environment sync wrote to wake, as `/petri wake` does: it
// sets petri.dev/wake-requested to now. Any replica may: it is a person's
// request, carried out as kubectl annotate would, and the leader reads it
// from the annotation. It returns the time it set.
//
// Anyone who reaches the read API may ask, so a request costs no request
// to the API server of its own: the environment is read from sync's cache
// (an unknown name is answered from it), and an environment whose wake was
// asked less than WakeEvery ago is not written again (the time of that
// request is returned).
func (s *Syncer) Wake(ctx context.Context, name string) (time.Time, error) {
	return s.views.wake(ctx, name)
}
