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
package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
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
	Provider  provider.Provider
	Resolver  *resolve.Resolver
	Config    ConfigSource
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
	// each); 4 when zero.
	Workers int
	// EventQueue bounds the accepted, unprocessed webhooks; 1024 when zero.
	EventQueue int
	// ReconcileTimeout bounds one repository reconcile; 2m when zero.
	ReconcileTimeout time.Duration
}

// Syncer is sync's engine.
type Syncer struct {
	opts   Options
	log    logr.Logger
	client client.Client
	cache  cache.Cache

	events        chan webhook.Event
	queue         workqueue.TypedRateLimitingInterface[string]
	feedback      workqueue.TypedRateLimitingInterface[prKey]
	configTrigger chan struct{}

	mu         sync.Mutex
	cfg        *config.Config
	repos      map[string]*repoState
	gates      map[gateKey]bool
	statuses   map[statusKey]provider.CommitStatus
	appStatus  map[string]*appStatus
	cacheReady bool
	configErr  error
}

type prKey struct {
	Repo   string
	Number int
}

type gateKey struct {
	Repo, SHA, Gate string
}

type statusKey struct {
	Repo, SHA, Context string
}

type repoState struct {
	// snapshots are pull requests from webhooks, newer than the listing.
	snapshots map[int]provider.PullRequest
	// prs holds the feedback state per pull request and application.
	prs map[int]map[string]*render.PRState
	// pendingSince is when the oldest unprocessed webhook arrived.
	pendingSince time.Time
}

type appStatus struct {
	LastReconcile time.Time
	LastError     string
	Kept          []string
}

// New builds a Syncer; Start runs it.
func New(opts Options) (*Syncer, error) {
	if opts.Namespace == "" || opts.Provider == nil || opts.Config == nil || opts.RESTConfig == nil || opts.Scheme == nil {
		return nil, errors.New("syncer: namespace, provider, config source, REST config and scheme are required")
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
	c, err := client.New(opts.RESTConfig, client.Options{Scheme: opts.Scheme})
	if err != nil {
		return nil, err
	}
	sel := labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: render.ManagedBy})
	ca, err := cache.New(opts.RESTConfig, cache.Options{
		Scheme:               opts.Scheme,
		DefaultNamespaces:    map[string]cache.Config{opts.Namespace: {}},
		DefaultLabelSelector: sel,
	})
	if err != nil {
		return nil, err
	}
	return &Syncer{
		opts:          opts,
		log:           opts.Log,
		client:        c,
		cache:         ca,
		events:        make(chan webhook.Event, opts.EventQueue),
		queue:         workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{}),
		feedback:      workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[prKey](), workqueue.TypedRateLimitingQueueConfig[prKey]{}),
		configTrigger: make(chan struct{}, 1),
		repos:         map[string]*repoState{},
		gates:         map[gateKey]bool{},
		statuses:      map[statusKey]provider.CommitStatus{},
		appStatus:     map[string]*appStatus{},
	}, nil
}

// Events is where the webhook handler puts accepted events.
func (s *Syncer) Events() chan<- webhook.Event { return s.events }

// Start runs until ctx ends.
func (s *Syncer) Start(ctx context.Context) error {
	inf, err := s.cache.GetInformer(ctx, &petriv1.EphemeralEnvironment{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.envChanged(o) },
		UpdateFunc: func(_, o any) { s.envChanged(o) },
		DeleteFunc: func(o any) { s.envChanged(o) },
	}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer s.queue.ShutDown()
	defer s.feedback.ShutDown()
	cacheErr := make(chan error, 1)
	wg.Go(func() { cacheErr <- s.cache.Start(ctx) })
	if !s.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("environment cache did not sync: %w", ctx.Err())
	}
	s.mu.Lock()
	s.cacheReady = true
	s.mu.Unlock()

	wg.Go(func() { s.configLoop(ctx) })
	wg.Go(func() { s.resyncLoop(ctx) })
	wg.Go(func() { s.eventLoop(ctx) })
	for range s.opts.Workers {
		wg.Go(func() {
			for s.processRepo(ctx) {
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for s.processFeedback(ctx) {
			}
		})
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-cacheErr:
		return err
	}
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
		return fmt.Errorf("config repository not loaded: %w", s.configErr)
	case s.cfg == nil:
		return errors.New("config repository not loaded yet")
	}
	return nil
}

// TriggerConfigFetch asks for a fetch of the config repository now.
func (s *Syncer) TriggerConfigFetch() {
	select {
	case s.configTrigger <- struct{}{}:
	default:
	}
}

func (s *Syncer) configLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.ConfigInterval)
	defer t.Stop()
	for {
		s.loadConfig(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.configTrigger:
		}
	}
}

func (s *Syncer) loadConfig(ctx context.Context) {
	snap, err := s.opts.Config.Fetch(ctx)
	if err != nil {
		s.log.Error(err, "Fetching the config repository failed; keeping the last revision")
		s.mu.Lock()
		s.configErr = err
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	s.configErr = nil
	same := s.cfg != nil && s.cfg.Revision == snap.Revision
	s.mu.Unlock()
	if same {
		return
	}
	cfg := config.Load(snap.Files)
	cfg.Revision = snap.Revision
	for _, e := range cfg.Errors {
		s.log.Error(e, "Config file has an error; its application is left as it was", "revision", snap.Revision)
	}
	s.opts.Metrics.ConfigErrors.Set(float64(len(cfg.Errors)))
	s.mu.Lock()
	var old []string
	if s.cfg != nil {
		old = s.cfg.Repositories()
	}
	s.cfg = cfg
	s.mu.Unlock()
	s.log.Info("Loaded config revision", "revision", snap.Revision, "applications", len(cfg.Applications), "sharedWorkloads", len(cfg.SharedWorkloads), "errors", len(cfg.Errors))
	if err := s.applySharedWorkloads(ctx, cfg); err != nil {
		s.log.Error(err, "Applying shared workloads failed")
	}
	for _, r := range append(old, cfg.Repositories()...) {
		s.queue.Add(r)
	}
}

func (s *Syncer) resyncLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.ResyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var repos []string
		if s.cfg != nil {
			repos = s.cfg.Repositories()
		}
		s.mu.Unlock()
		for _, r := range repos {
			s.queue.Add(r)
		}
	}
}

// Resync enqueues every repository now, as the periodic resync does.
func (s *Syncer) Resync() {
	s.mu.Lock()
	var repos []string
	if s.cfg != nil {
		repos = s.cfg.Repositories()
	}
	s.mu.Unlock()
	for _, r := range repos {
		s.queue.Add(r)
	}
}

func (s *Syncer) repo(key string) *repoState {
	r := s.repos[key]
	if r == nil {
		r = &repoState{snapshots: map[int]provider.PullRequest{}, prs: map[int]map[string]*render.PRState{}}
		s.repos[key] = r
	}
	return r
}

func (s *Syncer) eventLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-s.events:
			s.handleEvent(ev)
		}
	}
}

func (s *Syncer) handleEvent(ev webhook.Event) {
	key := strings.ToLower(ev.Repository)
	if ev.Type == "push" && s.isConfigRepo(ev) {
		s.log.Info("Config repository pushed; fetching", "ref", ev.Ref)
		s.TriggerConfigFetch()
		return
	}
	s.mu.Lock()
	r := s.repo(key)
	if r.pendingSince.IsZero() {
		r.pendingSince = ev.Received
	}
	switch ev.Type {
	case "pull_request":
		pr := *ev.PullRequest
		if old, ok := r.snapshots[pr.Number]; !ok || !pr.UpdatedAt.Before(old.UpdatedAt) {
			r.snapshots[pr.Number] = pr
		}
	case "status", "check_run":
		if ev.GateState == provider.GatePassed {
			s.gates[gateKey{key, ev.SHA, ev.Gate.String()}] = true
		}
	}
	s.mu.Unlock()
	s.queue.Add(key)
}

func (s *Syncer) isConfigRepo(ev webhook.Event) bool {
	want := normalizeRepo(s.opts.ConfigRepository)
	if want == "" {
		return false
	}
	if normalizeRepo(ev.Repository) == want {
		return true
	}
	for _, u := range ev.CloneURLs {
		if u != "" && normalizeRepo(u) == want {
			return true
		}
	}
	return false
}

// normalizeRepo reduces a repository URL or owner/name to host-less
// owner/name in lower case.
func normalizeRepo(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git")
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
		if j := strings.Index(s, "/"); j >= 0 {
			s = s[j+1:]
		}
	} else if i := strings.Index(s, ":"); i >= 0 && strings.Contains(s[:i], "@") {
		s = s[i+1:]
	}
	parts := strings.Split(s, "/")
	if len(parts) >= 2 {
		return parts[len(parts)-2] + "/" + parts[len(parts)-1]
	}
	return s
}

func (s *Syncer) processRepo(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
	err := s.reconcileRepo(rctx, key)
	cancel()
	s.opts.Metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	var rle *provider.RateLimitError
	switch {
	case err == nil:
		s.opts.Metrics.Reconciles.WithLabelValues("success").Inc()
		s.queue.Forget(key)
	case errors.As(err, &rle):
		s.opts.Metrics.Reconciles.WithLabelValues("rate_limited").Inc()
		s.log.Info("GitHub rate limit: nothing changed, retrying after the reset", "repository", key, "until", rle.Until)
		s.queue.Forget(key)
		s.queue.AddAfter(key, time.Until(rle.Until)+time.Second)
	default:
		s.opts.Metrics.Reconciles.WithLabelValues("error").Inc()
		s.log.Error(err, "Reconciling repository failed; nothing was deleted, retrying", "repository", key)
		s.queue.AddRateLimited(key)
	}
	return true
}

func (s *Syncer) appsFor(repo string) []*config.Application {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg == nil {
		return nil
	}
	var out []*config.Application
	for _, a := range s.cfg.Applications {
		if strings.EqualFold(a.Repository, repo) {
			out = append(out, a)
		}
	}
	return out
}

func (s *Syncer) setAppError(apps []*config.Application, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range apps {
		st := s.appStatus[a.Name]
		if st == nil {
			st = &appStatus{}
			s.appStatus[a.Name] = st
		}
		st.LastReconcile = time.Now()
		st.LastError = ""
		if err != nil {
			st.LastError = err.Error()
		}
	}
}

// reconcileRepo brings the environments of every application of one
// repository to the desired state.
func (s *Syncer) reconcileRepo(ctx context.Context, repo string) error {
	apps := s.appsFor(repo)
	s.mu.Lock()
	rs := s.repo(repo)
	since := rs.pendingSince
	rs.pendingSince = time.Time{}
	s.mu.Unlock()
	if len(apps) == 0 {
		return nil
	}
	log := s.log.WithValues("repository", repo)

	listed, err := s.opts.Provider.ListOpenPullRequests(ctx, repo)
	if err != nil {
		// Unknown, not "none": no environment is written or deleted.
		s.setAppError(apps, err)
		s.mu.Lock()
		if rs.pendingSince.IsZero() || (!since.IsZero() && since.Before(rs.pendingSince)) {
			rs.pendingSince = since
		}
		s.mu.Unlock()
		return err
	}
	open := s.mergeSnapshots(rs, listed)

	var envs petriv1.EphemeralEnvironmentList
	if err := s.client.List(ctx, &envs, client.InNamespace(s.opts.Namespace), client.MatchingLabels{petriv1.LabelManagedBy: render.ManagedBy}); err != nil {
		s.setAppError(apps, err)
		return fmt.Errorf("list environments: %w", err)
	}
	byApp := map[string][]*petriv1.EphemeralEnvironment{}
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) || !strings.EqualFold(e.Annotations[render.AnnotationRepository], repo) {
			continue
		}
		byApp[e.Labels[render.LabelApplication]] = append(byApp[e.Labels[render.LabelApplication]], e)
	}

	// Pull requests with an environment that the listing does not show as
	// open are read one by one: only a pull request read as closed is
	// evidence. A failed read leaves the environment alone.
	openBy := map[int]provider.PullRequest{}
	for _, pr := range open {
		openBy[pr.Number] = pr
	}
	closed := map[int]provider.PullRequest{}
	for _, list := range byApp {
		for _, e := range list {
			n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
			if _, ok := openBy[n]; ok || n == 0 {
				continue
			}
			if _, ok := closed[n]; ok {
				continue
			}
			pr, err := s.opts.Provider.GetPullRequest(ctx, repo, n)
			switch {
			case err != nil:
				log.Error(err, "Pull request state unknown; keeping its environment", "pullRequest", n, "environment", e.Name)
				var rle *provider.RateLimitError
				if errors.As(err, &rle) {
					return err
				}
			case pr.Open():
				// The listing disagreed (stale or truncated): trust the
				// pull request read on its own.
				openBy[n] = pr
				open = append(open, pr)
			default:
				closed[n] = pr
			}
		}
	}

	var errs []error
	touched := map[int]bool{}
	for _, app := range apps {
		existing := byApp[app.Name]
		var ex []render.Existing
		envBy := map[int]*petriv1.EphemeralEnvironment{}
		for _, e := range existing {
			n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
			ex = append(ex, render.Existing{Name: e.Name, Number: n, Deleting: e.DeletionTimestamp != nil})
			envBy[n] = e
		}
		plan := render.Decide(app, open, closed, ex)
		var appErrs []error
		for _, d := range plan.Delete {
			e := envBy[d.Number]
			if err := s.deleteEnv(ctx, e, d.Reason); err != nil {
				appErrs = append(appErrs, err)
				continue
			}
			s.setPRState(repo, d.Number, app.Name, func(st *render.PRState) {
				st.Deleted, st.Waiting, st.Error, st.Env = d.Reason, "", "", nil
			})
			touched[d.Number] = true
		}
		count := 0
		for _, e := range existing {
			if e.DeletionTimestamp == nil {
				count++
			}
		}
		count -= len(plan.Delete) - len(appErrs)
		for _, pr := range plan.Apply {
			created, err := s.writeEnv(ctx, app, pr, envBy[pr.Number], since)
			if err != nil {
				appErrs = append(appErrs, err)
			}
			if created {
				count++
			}
			touched[pr.Number] = true
		}
		for n, reason := range plan.Waiting {
			pr := openBy[n]
			s.setPRState(repo, n, app.Name, func(st *render.PRState) {
				st.HeadSHA, st.Waiting, st.Error, st.Deleted = pr.HeadSHA, reason, "", ""
			})
			touched[n] = true
		}
		// Pull requests that stopped matching and never had an environment
		// lose any waiting note.
		s.mu.Lock()
		for n, per := range rs.prs {
			st := per[app.Name]
			if st == nil || touched[n] {
				continue
			}
			if _, isOpen := openBy[n]; !isOpen || envBy[n] == nil {
				if st.Waiting != "" || st.Error != "" {
					st.Waiting, st.Error = "", ""
					touched[n] = true
				}
			}
		}
		s.mu.Unlock()
		kept := make([]string, 0, len(plan.Unknown))
		for _, u := range plan.Unknown {
			kept = append(kept, u.Name)
		}
		s.mu.Lock()
		st := s.appStatus[app.Name]
		if st == nil {
			st = &appStatus{}
			s.appStatus[app.Name] = st
		}
		st.Kept = kept
		s.mu.Unlock()
		s.setAppError([]*config.Application{app}, errors.Join(appErrs...))
		s.opts.Metrics.Environments.WithLabelValues(app.Name).Set(float64(count))
		errs = append(errs, appErrs...)
	}
	for n := range touched {
		s.feedback.Add(prKey{repo, n})
	}
	return errors.Join(errs...)
}

// mergeSnapshots overlays webhook snapshots that are newer than the
// listing. Snapshots the listing caught up with are dropped.
func (s *Syncer) mergeSnapshots(rs *repoState, listed []provider.PullRequest) []provider.PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]provider.PullRequest, 0, len(listed))
	seen := map[int]bool{}
	for _, pr := range listed {
		seen[pr.Number] = true
		if snap, ok := rs.snapshots[pr.Number]; ok {
			if snap.UpdatedAt.After(pr.UpdatedAt) {
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
		// is used; a closed one is confirmed through GetPullRequest.
		if snap.Open() && time.Since(snap.UpdatedAt) < 10*time.Minute {
			out = append(out, snap)
		} else {
			delete(rs.snapshots, n)
		}
	}
	return out
}

func (s *Syncer) setPRState(repo string, number int, app string, change func(*render.PRState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.repo(repo)
	per := rs.prs[number]
	if per == nil {
		per = map[string]*render.PRState{}
		rs.prs[number] = per
	}
	st := per[app]
	if st == nil {
		st = &render.PRState{Application: app, Repository: repo, Number: number}
		per[app] = st
	}
	change(st)
}

func (s *Syncer) gatePassed(ctx context.Context, repo, sha string, gate provider.Gate) (bool, string, error) {
	k := gateKey{repo, sha, gate.String()}
	s.mu.Lock()
	passed := s.gates[k]
	s.mu.Unlock()
	if passed {
		return true, "", nil
	}
	st, reason, err := s.opts.Provider.GateState(ctx, repo, sha, gate)
	if err != nil {
		return false, "", err
	}
	if st == provider.GatePassed {
		s.mu.Lock()
		if len(s.gates) > 100000 {
			clear(s.gates)
		}
		s.gates[k] = true
		s.mu.Unlock()
		return true, "", nil
	}
	return false, reason, nil
}

// writeEnv renders and applies one environment. With an artifact gate, a
// head commit whose gate has not passed is not written: the environment
// keeps the commit it has, or is not created yet.
func (s *Syncer) writeEnv(ctx context.Context, app *config.Application, pr provider.PullRequest, existing *petriv1.EphemeralEnvironment, since time.Time) (created bool, err error) {
	repo := strings.ToLower(pr.Repository)
	target := pr
	waiting := ""
	if app.ArtifactGate != nil {
		gate := provider.Gate{CheckRun: app.ArtifactGate.CheckRun, StatusContext: app.ArtifactGate.StatusContext}
		ok, reason, err := s.gatePassed(ctx, repo, pr.HeadSHA, gate)
		if err != nil {
			var rle *provider.RateLimitError
			if errors.As(err, &rle) {
				return false, err
			}
			reason = fmt.Sprintf("cannot read %s: %v", gate, err)
		}
		if !ok {
			waiting = reason
			if existing == nil || existing.Spec.Source == nil {
				s.setPRState(repo, pr.Number, app.Name, func(st *render.PRState) {
					st.HeadSHA, st.Waiting, st.Error, st.Deleted = pr.HeadSHA, waiting, "", ""
				})
				return false, nil
			}
			if existing.Spec.Source.SHA == pr.HeadSHA {
				waiting = ""
			} else {
				target.HeadSHA = existing.Spec.Source.SHA
			}
		}
	}
	versions := map[string]string{}
	for i, c := range app.Components {
		v, err := s.opts.Resolver.Resolve(ctx, c.Chart.Repository, c.Chart.Name, c.Chart.Version)
		if err != nil {
			field := fmt.Sprintf("components[%d].chart.version", i)
			err = fmt.Errorf("%s:%d: %s: %w", app.File, app.Line(field), field, err)
			s.setPRState(repo, pr.Number, app.Name, func(st *render.PRState) {
				st.HeadSHA, st.Error, st.Waiting, st.Deleted = pr.HeadSHA, "chart resolution failed: "+err.Error(), "", ""
			})
			return false, err
		}
		versions[c.Name] = v
	}
	ee, err := render.Environment(app, target, s.opts.Namespace, versions)
	if err != nil {
		s.setPRState(repo, pr.Number, app.Name, func(st *render.PRState) {
			st.HeadSHA, st.Error, st.Waiting, st.Deleted = pr.HeadSHA, err.Error(), "", ""
		})
		return false, err
	}
	url := ee.Annotations[render.AnnotationURL]
	s.setPRState(repo, pr.Number, app.Name, func(st *render.PRState) {
		st.HeadSHA, st.Waiting, st.Error, st.Deleted, st.URL = pr.HeadSHA, waiting, "", "", url
	})
	if existing != nil && sameEnv(existing, ee) {
		return false, nil
	}
	if existing == nil {
		// Never take over an object of that name that sync did not write.
		var other petriv1.EphemeralEnvironment
		err := s.client.Get(ctx, client.ObjectKeyFromObject(ee), &other)
		switch {
		case err == nil && !render.Owned(other.Labels):
			err = fmt.Errorf("environment %s exists and is not managed by petri-sync; leaving it alone", ee.Name)
			s.setPRState(repo, pr.Number, app.Name, func(st *render.PRState) { st.Error = err.Error() })
			return false, err
		case err != nil && !apierrors.IsNotFound(err):
			return false, fmt.Errorf("get environment %s: %w", ee.Name, err)
		}
	}
	if err := s.apply(ctx, ee); err != nil {
		return false, fmt.Errorf("apply environment %s: %w", ee.Name, err)
	}
	op := "update"
	if existing == nil {
		op = "create"
	}
	s.opts.Metrics.Writes.WithLabelValues("EphemeralEnvironment", op).Inc()
	if !since.IsZero() {
		s.opts.Metrics.WebhookToWrite.Observe(time.Since(since).Seconds())
	}
	s.log.Info("Wrote environment", "environment", ee.Name, "operation", op, "pullRequest", pr.Number, "sha", target.HeadSHA)
	return existing == nil, nil
}

// sameEnv reports whether applying want would change nothing sync owns.
func sameEnv(have, want *petriv1.EphemeralEnvironment) bool {
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if have.Annotations[k] != v {
			return false
		}
	}
	return jsonEqual(have.Spec, want.Spec)
}

func jsonEqual(a, b any) bool {
	var x, y any
	ra, err1 := json.Marshal(a)
	rb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil || json.Unmarshal(ra, &x) != nil || json.Unmarshal(rb, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// apply writes an object with server-side apply as field manager
// petri-sync, forcing ownership of the fields it sets.
func (s *Syncer) apply(ctx context.Context, obj client.Object) error {
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(raw, &u.Object); err != nil {
		return err
	}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return s.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(render.FieldManager), client.ForceOwnership)
}

// deleteEnv deletes an environment sync owns, with its UID as a
// precondition so that a re-created object of the same name is never hit.
func (s *Syncer) deleteEnv(ctx context.Context, e *petriv1.EphemeralEnvironment, reason string) error {
	if e == nil || !render.Owned(e.Labels) {
		return fmt.Errorf("refusing to delete an environment that sync does not own")
	}
	uid := e.UID
	err := s.client.Delete(ctx, e, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete environment %s: %w", e.Name, err)
	}
	s.opts.Metrics.Writes.WithLabelValues("EphemeralEnvironment", "delete").Inc()
	s.log.Info("Deleted environment", "environment", e.Name, "reason", reason)
	return nil
}

// applySharedWorkloads writes the declared shared workloads. Ones sync
// wrote that are no longer declared are deleted only when the whole config
// revision loaded without errors.
func (s *Syncer) applySharedWorkloads(ctx context.Context, cfg *config.Config) error {
	var errs []error
	declared := map[string]bool{}
	for _, sw := range cfg.SharedWorkloads {
		declared[sw.Name] = true
		v, err := s.opts.Resolver.Resolve(ctx, sw.Spec.Chart.Repository, sw.Spec.Chart.Name, sw.Spec.Chart.Version)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: spec.chart.version: %w", sw.File, err))
			continue
		}
		obj := render.SharedWorkload(sw, s.opts.Namespace, v)
		var have petriv1.SharedWorkload
		err = s.client.Get(ctx, client.ObjectKeyFromObject(obj), &have)
		switch {
		case err == nil && !render.Owned(have.Labels):
			errs = append(errs, fmt.Errorf("%s: shared workload %s exists and is not managed by petri-sync; leaving it alone", sw.File, sw.Name))
			continue
		case err == nil && jsonEqual(have.Spec, obj.Spec):
			continue
		case err != nil && !apierrors.IsNotFound(err):
			errs = append(errs, err)
			continue
		}
		if err := s.apply(ctx, obj); err != nil {
			errs = append(errs, fmt.Errorf("apply shared workload %s: %w", sw.Name, err))
			continue
		}
		s.opts.Metrics.Writes.WithLabelValues("SharedWorkload", "apply").Inc()
	}
	if len(cfg.Errors) > 0 {
		return errors.Join(errs...)
	}
	var list petriv1.SharedWorkloadList
	if err := s.client.List(ctx, &list, client.InNamespace(s.opts.Namespace), client.MatchingLabels{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: render.SharedWorkloadOwner}); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range list.Items {
		sw := &list.Items[i]
		if declared[sw.Name] || !render.Owned(sw.Labels) || sw.DeletionTimestamp != nil {
			continue
		}
		uid := sw.UID
		if err := s.client.Delete(ctx, sw, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		s.opts.Metrics.Writes.WithLabelValues("SharedWorkload", "delete").Inc()
		s.log.Info("Deleted shared workload no longer declared", "sharedWorkload", sw.Name)
	}
	return errors.Join(errs...)
}

func (s *Syncer) envChanged(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	e, ok := o.(*petriv1.EphemeralEnvironment)
	if !ok || e.Spec.Source == nil {
		return
	}
	repo := strings.ToLower(e.Annotations[render.AnnotationRepository])
	n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
	if repo == "" || n == 0 {
		return
	}
	s.feedback.Add(prKey{repo, n})
}

func (s *Syncer) processFeedback(ctx context.Context) bool {
	key, quit := s.feedback.Get()
	if quit {
		return false
	}
	defer s.feedback.Done(key)
	fctx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
	err := s.sendFeedback(fctx, key)
	cancel()
	var rle *provider.RateLimitError
	switch {
	case err == nil:
		s.feedback.Forget(key)
	case errors.As(err, &rle):
		s.feedback.Forget(key)
		s.feedback.AddAfter(key, time.Until(rle.Until)+time.Second)
	default:
		s.log.Error(err, "Feedback on pull request failed; retrying", "repository", key.Repo, "pullRequest", key.Number)
		s.feedback.AddRateLimited(key)
	}
	return true
}

// sendFeedback posts the commit status of each application and the one
// comment of the pull request, when they differ from what was posted.
func (s *Syncer) sendFeedback(ctx context.Context, key prKey) error {
	var envs petriv1.EphemeralEnvironmentList
	if err := s.cache.List(ctx, &envs, client.InNamespace(s.opts.Namespace), client.MatchingLabels{render.LabelPullRequest: strconv.Itoa(key.Number)}); err != nil {
		return err
	}
	s.mu.Lock()
	rs := s.repo(key.Repo)
	states := map[string]render.PRState{}
	for app, st := range rs.prs[key.Number] {
		states[app] = *st
	}
	s.mu.Unlock()
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) || !strings.EqualFold(e.Annotations[render.AnnotationRepository], key.Repo) {
			continue
		}
		app := e.Labels[render.LabelApplication]
		st, ok := states[app]
		if !ok {
			st = render.PRState{Application: app, Repository: key.Repo, Number: key.Number, HeadSHA: e.Spec.Source.SHA, URL: e.Annotations[render.AnnotationURL]}
		}
		st.Env = e
		st.Deleted = ""
		if st.URL == "" {
			st.URL = e.Annotations[render.AnnotationURL]
		}
		states[app] = st
	}
	if len(states) == 0 {
		return nil
	}
	var list []render.PRState
	var errs []error
	for _, app := range slices.Sorted(maps.Keys(states)) {
		st := states[app]
		list = append(list, st)
		cs, ok := render.CommitStatus(st)
		if !ok || st.HeadSHA == "" {
			continue
		}
		sk := statusKey{key.Repo, st.HeadSHA, cs.Context}
		s.mu.Lock()
		last, posted := s.statuses[sk]
		s.mu.Unlock()
		if posted && last == cs {
			continue
		}
		if err := s.opts.Provider.SetCommitStatus(ctx, key.Repo, st.HeadSHA, cs); err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		s.statuses[sk] = cs
		s.mu.Unlock()
	}
	worth := false
	for _, st := range list {
		if st.Env != nil || st.Waiting != "" || st.Error != "" || st.Deleted != "" {
			worth = true
		}
	}
	if worth {
		if err := s.opts.Provider.UpsertComment(ctx, key.Repo, key.Number, render.CommentMarker, render.Comment(list)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Environment is the read API's view of one environment.
type Environment struct {
	Name        string            `json:"name"`
	Application string            `json:"application"`
	Repository  string            `json:"repository"`
	PullRequest int               `json:"pullRequest"`
	Branch      string            `json:"branch,omitempty"`
	SHA         string            `json:"sha,omitempty"`
	URL         string            `json:"url,omitempty"`
	PRURL       string            `json:"pullRequestURL,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Phase       string            `json:"phase"`
	Detail      string            `json:"detail,omitempty"`
	Waiting     string            `json:"waiting,omitempty"`
	Error       string            `json:"error,omitempty"`
	Components  []ComponentState  `json:"components"`
	Labels      map[string]string `json:"labels,omitempty"`
	Created     time.Time         `json:"created"`
}

// ComponentState is one component in the read API.
type ComponentState struct {
	Name      string `json:"name"`
	Chart     string `json:"chart"`
	Version   string `json:"version"`
	Phase     string `json:"phase"`
	LastError string `json:"lastError,omitempty"`
}

// Environments lists the environments sync wrote, from the cache.
func (s *Syncer) Environments(ctx context.Context) ([]Environment, error) {
	var envs petriv1.EphemeralEnvironmentList
	if err := s.cache.List(ctx, &envs, client.InNamespace(s.opts.Namespace)); err != nil {
		return nil, err
	}
	out := make([]Environment, 0, len(envs.Items))
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) {
			continue
		}
		phase, detail := render.EnvState(e)
		v := Environment{
			Name: e.Name, Application: e.Labels[render.LabelApplication], Repository: e.Annotations[render.AnnotationRepository],
			URL: e.Annotations[render.AnnotationURL], Namespace: e.Status.TargetNamespace, Phase: phase, Detail: detail,
			Created: e.CreationTimestamp.Time,
		}
		v.PullRequest, _ = strconv.Atoi(e.Labels[render.LabelPullRequest])
		if src := e.Spec.Source; src != nil {
			v.Branch, v.SHA, v.PRURL = src.Branch, src.SHA, src.URL
		}
		status := map[string]petriv1.ComponentStatus{}
		for _, c := range e.Status.Components {
			status[c.Name] = c
		}
		for _, c := range e.Spec.Components {
			p := string(status[c.Name].Phase)
			if p == "" {
				p = string(petriv1.ComponentPending)
			}
			v.Components = append(v.Components, ComponentState{Name: c.Name, Chart: c.Chart.Name, Version: c.Chart.Version, Phase: p, LastError: status[c.Name].LastError})
		}
		s.mu.Lock()
		if st := s.repo(strings.ToLower(v.Repository)).prs[v.PullRequest][v.Application]; st != nil {
			v.Waiting, v.Error = st.Waiting, st.Error
		}
		s.mu.Unlock()
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Application is the read API's view of one application or broken file.
type Application struct {
	Name          string    `json:"name"`
	File          string    `json:"file"`
	Repository    string    `json:"repository,omitempty"`
	State         string    `json:"state"`
	Errors        []string  `json:"errors,omitempty"`
	LastReconcile time.Time `json:"lastReconcile,omitzero"`
	LastError     string    `json:"lastError,omitempty"`
	KeptUnknown   []string  `json:"keptUnknown,omitempty"`
}

// Applications reports every application of the current config revision and
// every broken file, whose environments are left as they were.
func (s *Syncer) Applications() (revision string, apps []Application) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg == nil {
		return "", nil
	}
	for _, a := range s.cfg.Applications {
		v := Application{Name: a.Name, File: a.File, Repository: a.Repository, State: "Active"}
		if st := s.appStatus[a.Name]; st != nil {
			v.LastReconcile, v.LastError, v.KeptUnknown = st.LastReconcile, st.LastError, st.Kept
			if st.LastError != "" {
				v.State = "Degraded"
			}
		}
		apps = append(apps, v)
	}
	byFile := map[string][]string{}
	for _, e := range s.cfg.Errors {
		byFile[e.File] = append(byFile[e.File], e.Error())
	}
	for _, f := range slices.Sorted(maps.Keys(byFile)) {
		apps = append(apps, Application{Name: s.cfg.BrokenFiles[f], File: f, State: "ConfigError", Errors: byFile[f]})
	}
	return s.cfg.Revision, apps
}
