// Manager: sync runs as a controller-runtime manager. Every replica keeps
// the environment cache and the config, serves the read API and takes
// webhooks (runnables that need no election); only the holder of the
// manager's Lease reconciles repositories, writes EphemeralEnvironments and
// SharedWorkloads and reports on pull requests (the repository controller
// and the leader's loops). A new leader loads the config and resyncs every
// repository before anything else, which closes whatever gap the change of
// leader left. A webhook received by a replica that does not lead is
// recorded on its repository's Repository object (refresh.go), which the
// leader's controller watches.

package syncer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Timings of the Lease when LeaderElection leaves them zero, chosen to ride
// out a slow API server: a renewal may keep failing or timing out for 20 s
// (each request given half of that) before the leader gives up, and a
// leader that stops renewing is replaced about 30 s after its last renewal.
// One that shuts down releases the Lease, and a follower takes it within
// the retry period.
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultRenewDeadline = 20 * time.Second
	DefaultRetryPeriod   = 4 * time.Second
	// DefaultLeaseName names the Lease, in sync's own namespace.
	DefaultLeaseName = "petri-sync-leader"
)

// ErrLeadershipLost is returned by Start when the replica stopped renewing
// a Lease it held. Its memory (statuses posted, comments found) may be out
// of date by then, so it does not go on as a follower: the process ends and
// starts afresh.
var ErrLeadershipLost = errors.New("lost sync's lease")

// LeaderElection makes a Syncer one of several replicas.
type LeaderElection struct {
	// Namespace holds the Lease and the Repository objects webhooks are
	// recorded on: sync's own namespace (petri-sync), not the management
	// namespace.
	Namespace string
	// Identity names this replica in the Lease (its pod's name); it must
	// differ between replicas. A random one when empty.
	Identity string
	// LeaseName defaults to DefaultLeaseName.
	LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's; see
	// the defaults above.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

func (le *LeaderElection) withDefaults() (*LeaderElection, error) {
	out := *le
	if out.Namespace == "" {
		return nil, errors.New("leader election needs the namespace of its Lease")
	}
	if out.Identity == "" {
		out.Identity = DefaultIdentity()
	}
	if out.LeaseName == "" {
		out.LeaseName = DefaultLeaseName
	}
	if out.LeaseDuration == 0 {
		out.LeaseDuration = DefaultLeaseDuration
	}
	if out.RenewDeadline == 0 {
		out.RenewDeadline = DefaultRenewDeadline
	}
	if out.RetryPeriod == 0 {
		out.RetryPeriod = DefaultRetryPeriod
	}
	if out.LeaseDuration <= out.RenewDeadline || out.RenewDeadline <= out.RetryPeriod*6/5 {
		return nil, fmt.Errorf("leader election: the lease duration (%s) must exceed the renew deadline (%s), and that 1.2 retry periods (%s)", out.LeaseDuration, out.RenewDeadline, out.RetryPeriod)
	}
	return &out, nil
}

// DefaultIdentity is the pod's name ($POD_NAME) or, outside a pod, the host
// name with a random suffix, so that two processes on one machine never
// share an identity. A process its pod starts again keeps the pod's name,
// and so takes the Lease it held at once.
func DefaultIdentity() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "petri-sync"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

// newManager builds the manager: its cache (sync's environments in the
// management namespace; with leader election, the Repository objects in
// sync's namespace) and, with leader election, its Lease.
func newManager(opts Options, cacheOpts cache.Options) (manager.Manager, resourcelock.Interface, error) {
	mo := manager.Options{
		Scheme: opts.Scheme,
		Logger: opts.Log,
		Cache:  cacheOpts,
		// sync serves its own metrics and probes (sync/api).
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Several Syncers may run in one process (the tests' replicas).
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// The Lease is released only once every part has stopped, so that
		// a follower never acts while this replica still writes; the
		// process's own stop bounds the wait (api.RunOptions).
		GracefulShutdownTimeout: ptr.To(time.Duration(-1)),
	}
	le := opts.LeaderElection
	if le == nil {
		m, err := manager.New(opts.RESTConfig, mo)
		return m, nil, err
	}
	// A client of its own, each request given half the renew deadline: one
	// request that hangs never outlasts the deadline, and the other
	// requests never hold up a renewal in the client's rate limiter.
	cfg := rest.AddUserAgent(rest.CopyConfig(opts.RESTConfig), "petri-sync-leader-election")
	cfg.Timeout = max(le.RenewDeadline/2, time.Second)
	leases, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("leader election: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.LeaseName},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	mo.LeaderElection = true
	mo.LeaderElectionID = le.LeaseName
	mo.LeaderElectionNamespace = le.Namespace
	mo.LeaderElectionResourceLockInterface = lock
	mo.LeaderElectionReleaseOnCancel = true
	mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = &le.LeaseDuration, &le.RenewDeadline, &le.RetryPeriod
	m, err := manager.New(opts.RESTConfig, mo)
	return m, lock, err
}

// leadership is whether this replica acts, and the parts and writes that
// run under it: the leadership ends only after every write started under
// it has returned, and Start returns only after every part has stopped.
type leadership struct {
	// lock is the manager's Lease, with leader election only.
	lock resourcelock.Interface

	// leadMu, the engine's lock (memory.mu), guards leadCtx, the context
	// of the current leadership (nil while this replica does not lead),
	// and stopped (Start is returning: no part starts any more). work
	// counts the writes running under the leadership; running counts the
	// parts the manager runs.
	leadMu  *sync.Mutex
	leadCtx context.Context
	stopped bool
	work    sync.WaitGroup
	running sync.WaitGroup
}

// runnable is a part of the Syncer the manager runs: on every replica
// (leader false) or only on the one that holds the Lease.
type runnable struct {
	lead   *leadership
	leader bool
	run    func(ctx context.Context)
}

// NeedLeaderElection tells the manager where the part runs.
func (r runnable) NeedLeaderElection() bool { return r.leader }

// Start runs the part; not at all once the Syncer's Start is returning.
func (r runnable) Start(ctx context.Context) error {
	l := r.lead
	l.leadMu.Lock()
	if l.stopped {
		l.leadMu.Unlock()
		return nil
	}
	l.running.Add(1)
	l.leadMu.Unlock()
	defer l.running.Done()
	r.run(ctx)
	return nil
}

// Leader reports whether this replica acts now.
func (l *leadership) Leader() bool {
	l.leadMu.Lock()
	defer l.leadMu.Unlock()
	return l.leadCtx != nil
}

// LeaderIdentity is the identity holding sync's Lease, as the API server
// answers now; empty without leader election or when it cannot say.
func (l *leadership) LeaderIdentity() string {
	if l.lock == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, _, err := l.lock.Get(ctx)
	if err != nil {
		return ""
	}
	return rec.HolderIdentity
}

// asLeader runs f with the leadership's context when this replica leads and
// reports whether it did. The leadership ends only after f has returned.
func (l *leadership) asLeader(f func(ctx context.Context)) bool {
	l.leadMu.Lock()
	ctx := l.leadCtx
	if ctx == nil {
		l.leadMu.Unlock()
		return false
	}
	l.work.Add(1)
	l.leadMu.Unlock()
	defer l.work.Done()
	f(ctx)
	return true
}

// begin makes this replica the one that acts, for as long as ctx lasts.
func (l *leadership) begin(ctx context.Context) {
	l.leadMu.Lock()
	l.leadCtx = ctx
	l.leadMu.Unlock()
}

// end ends the leadership: nothing starts under it any more.
func (l *leadership) end() {
	l.leadMu.Lock()
	l.leadCtx = nil
	l.leadMu.Unlock()
}

// stop makes sure no part starts any more, and waits for those running.
func (l *leadership) stop() {
	l.leadMu.Lock()
	l.stopped = true
	l.leadMu.Unlock()
	l.running.Wait()
}

// lead is the leader's part beside the repository controller: it makes
// this replica the one that acts, asks the config loop for a full load
// (the config applied and every repository resynced, whatever the
// revision), and runs the resync loop and the feedback workers until the
// leadership ends; then it waits until every write started under the
// leadership has returned, and hands the merge groups it did not act on
// to the next leader.
func (s *Syncer) lead(ctx context.Context) {
	// The full load is asked for before this replica acts: a load already
	// under way that applies as the leader does it, and the one triggered
	// here then finds nothing new (one pass per repository, not two).
	s.config.fullResync.Store(true)
	s.begin(ctx)
	s.opts.Metrics.Leader.Set(1)
	s.log.Info("Leading: loading the config and resyncing every repository")
	s.config.trigger()
	var wg sync.WaitGroup
	wg.Go(func() { s.config.resyncLoop(ctx) })
	for range 2 {
		wg.Go(func() {
			for s.processFeedback(ctx) {
			}
		})
	}
	<-ctx.Done()
	s.end()
	s.feedback.ShutDown()
	wg.Wait()
	s.leadership.work.Wait()
	s.handOverGroups(ctx)
	s.opts.Metrics.Leader.Set(0)
}

// Start runs until ctx ends. Without LeaderElection it acts at once; with
// it, it serves (the cache, the config view, webhooks recorded for the
// leader) and acts only while it holds the Lease. It returns an error when
// it loses a Lease it held: the process ends and starts afresh, with
// nothing in memory from its leadership.
func (s *Syncer) Start(ctx context.Context) error {
	err := s.mgr.Start(ctx)
	// Whatever ended the manager (which does not wait for its runnables
	// when the Lease is lost), nothing of the Syncer runs on after Start
	// returns.
	s.stop()
	s.queue.ShutDown()
	s.feedback.ShutDown()
	if err == nil || ctx.Err() != nil {
		return err
	}
	select {
	case <-s.mgr.Elected():
		if le := s.opts.LeaderElection; le != nil && strings.Contains(err.Error(), "leader election lost") {
			s.log.Info("Lost the lease; stopping")
			return fmt.Errorf("%w %s/%s as %s: stopping so that a fresh process follows", ErrLeadershipLost, le.Namespace, le.LeaseName, le.Identity)
		}
	default:
	}
	return err
}
