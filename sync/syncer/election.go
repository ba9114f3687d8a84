// Election: several replicas, one of which acts. Every replica keeps the
// environment cache and the config, serves the read API and takes webhooks;
// only the holder of the Lease writes EphemeralEnvironments and
// SharedWorkloads, reconciles repositories and reports on pull requests.
// A new leader loads the config and resyncs every repository before
// anything else, which closes whatever gap the change of leader left.

package syncer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Timings of the Lease when LeaderElection leaves them zero: a leader that
// stops renewing is replaced about 15 s after its last renewal; one that
// shuts down releases the Lease, and a follower takes it within the retry
// period.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultLeaseName names the Lease and DefaultHandoverConfigMap the
	// ConfigMap through which followers hand events to the leader, both in
	// sync's own namespace.
	DefaultLeaseName         = "petri-sync-leader"
	DefaultHandoverConfigMap = "petri-sync-events"
	// DefaultHandoverLimit bounds the events waiting in that ConfigMap.
	DefaultHandoverLimit = 256
)

// ErrLeadershipLost is returned by Start when the replica stopped renewing
// a Lease it held. Its memory (statuses posted, comments found) may be out
// of date by then, so it does not go on as a follower: the process ends and
// starts afresh.
var ErrLeadershipLost = errors.New("lost sync's lease")

// LeaderElection makes a Syncer one of several replicas.
type LeaderElection struct {
	// Namespace holds the Lease and the hand-over ConfigMap: sync's own
	// namespace (petri-sync), not the management namespace.
	Namespace string
	// Identity names this replica in the Lease (its pod's name); it must
	// differ between replicas. A random one when empty.
	Identity string
	// LeaseName and HandoverConfigMap default to DefaultLeaseName and
	// DefaultHandoverConfigMap.
	LeaseName         string
	HandoverConfigMap string
	// HandoverLimit bounds the events waiting in the ConfigMap; beyond it
	// they are replaced by one request for a full resync.
	HandoverLimit int
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
	if out.HandoverConfigMap == "" {
		out.HandoverConfigMap = DefaultHandoverConfigMap
	}
	if out.HandoverLimit <= 0 {
		out.HandoverLimit = DefaultHandoverLimit
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
	return &out, nil
}

// DefaultIdentity is the pod's name ($POD_NAME) or, outside a pod, the host
// name with a random suffix, so that two processes on one machine never
// share an identity.
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

// Leader reports whether this replica acts now.
func (s *Syncer) Leader() bool {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	return s.leadCtx != nil
}

// LeaderIdentity is the identity that held the Lease when this replica last
// looked; empty without leader election.
func (s *Syncer) LeaderIdentity() string {
	id, _ := s.leaderID.Load().(string)
	return id
}

// asLeader runs f with the leadership's context when this replica leads and
// reports whether it did. The leadership ends only after f has returned.
func (s *Syncer) asLeader(f func(ctx context.Context)) bool {
	s.leadMu.Lock()
	ctx := s.leadCtx
	if ctx == nil {
		s.leadMu.Unlock()
		return false
	}
	s.leadWork.Add(1)
	s.leadMu.Unlock()
	defer s.leadWork.Done()
	f(ctx)
	return true
}

// takeLead makes this replica the one that acts, under ctx, and asks the
// config loop for a full load: the config applied and every repository
// resynced, whatever the revision.
func (s *Syncer) takeLead(ctx context.Context) {
	s.leadMu.Lock()
	s.leadCtx = ctx
	s.leadMu.Unlock()
	s.opts.Metrics.Leader.Set(1)
	s.fullResync.Store(true)
	s.TriggerConfigFetch()
}

// act runs the leader's work until ctx ends, then waits until every part
// of it (and every write started under the leadership) has returned.
func (s *Syncer) act(ctx context.Context) {
	var wg sync.WaitGroup
	if s.opts.LeaderElection != nil {
		wg.Go(func() { s.takeHandovers(ctx) })
	}
	wg.Go(func() { s.resyncLoop(ctx) })
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
	<-ctx.Done()
	s.leadMu.Lock()
	s.leadCtx = nil
	s.leadMu.Unlock()
	s.queue.ShutDown()
	s.feedback.ShutDown()
	wg.Wait()
	s.leadWork.Wait()
	s.opts.Metrics.Leader.Set(0)
}

// elect takes part in the election until ctx ends or a held Lease is lost.
// On shutdown the leader's work stops before the Lease is released, so a
// follower never acts while this replica still writes.
func (s *Syncer) elect(ctx context.Context, cacheErr <-chan error) error {
	le := s.opts.LeaderElection
	log := s.log.WithValues("lease", le.Namespace+"/"+le.LeaseName, "identity", le.Identity)
	// A client of its own: the hand-over's requests never hold up a
	// renewal in the client's rate limiter.
	leases, err := coordinationv1client.NewForConfig(rest.CopyConfig(s.opts.RESTConfig))
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.LeaseName},
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	var (
		mu      sync.Mutex
		closing bool
		leading sync.WaitGroup
	)
	// running ends the leader's work when the process stops or the cache
	// fails, before the Lease is released.
	running, stopRunning := context.WithCancel(ctx)
	defer stopRunning()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            "petri-sync",
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if closing {
					mu.Unlock()
					return
				}
				leading.Add(1)
				mu.Unlock()
				defer leading.Done()
				// The work ends with the leadership or with the process,
				// whichever comes first.
				wctx, cancel := context.WithCancel(lctx)
				defer cancel()
				defer context.AfterFunc(running, cancel)()
				log.Info("Leading: loading the config and resyncing every repository")
				s.takeLead(wctx)
				s.act(wctx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				s.leaderID.Store(id)
				if id != le.Identity {
					log.Info("Following: webhooks are handed to the leader", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// The elector runs on a context of its own: it is cancelled (and the
	// Lease released) only after the leader's work has stopped.
	elCtx, elCancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), log))
	defer elCancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		elector.Run(elCtx)
	}()
	stopActing := func() {
		stopRunning()
		mu.Lock()
		closing = true
		mu.Unlock()
		leading.Wait()
	}
	select {
	case <-ctx.Done():
		stopActing()
		elCancel()
		<-ran
		return nil
	case err := <-cacheErr:
		// Stop acting before the Lease goes.
		stopActing()
		elCancel()
		<-ran
		return err
	case <-ran:
		stopActing()
		if ctx.Err() != nil {
			return nil
		}
		log.Info("Lost the lease; stopping")
		return fmt.Errorf("%w %s/%s as %s: stopping so that a fresh process follows", ErrLeadershipLost, le.Namespace, le.LeaseName, le.Identity)
	}
}
