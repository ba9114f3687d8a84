package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
)

// clusterRegistry holds the operator's connection to each registered
// workload cluster: a controller-runtime cluster (its own client and a
// cache scoped as the management cluster's) built from the credentials of
// its WorkloadCluster's Secret, and what the last probe found. The
// WorkloadCluster controller keeps it; the environment passes read it.
type clusterRegistry struct {
	mu    sync.Mutex
	conns map[string]*clusterConn
	// ctx lives as long as the manager (Start); connections' caches run
	// under it.
	ctx context.Context
	// onConnect registers a new connection's events with the environment
	// controller.
	onConnect func(*clusterConn) error
	// onProbed hears the first probe's finding of each connection: the
	// passes that waited for it go on (the WorkloadCluster's status may
	// not change, so its watch would not wake them).
	onProbed []func(name string)
	// startedAt is when the registry started; until connectGrace after
	// it, a cluster not connected yet is one the WorkloadCluster
	// controller has not come to, not one that does not answer.
	startedAt time.Time
	options   Options
}

// connectGrace is how long after the operator starts a workload cluster it
// has no connection to yet counts as connecting rather than unreachable.
const connectGrace = 30 * time.Second

// clusterPendingPoll is how soon a pass that waits for its cluster's first
// probe looks again, should the probe's wake-up be missed.
const clusterPendingPoll = 5 * time.Second

// clusterConn is one workload cluster's connection.
type clusterConn struct {
	name string
	// credentials identifies the Secret's content it was built from.
	credentials string
	cluster     cluster.Cluster
	target      *target
	// ctx ends when the connection is stopped (cancel): its caches and
	// the controllers' sources of its events end with it.
	ctx    context.Context
	cancel context.CancelFunc
	// synced is closed once its cache has synced.
	synced chan struct{}

	mu sync.Mutex
	// reachable, reason and message are the last probe's finding; probed
	// says there is one.
	reachable, probed bool
	reason, message   string
}

func newClusterRegistry(o Options) *clusterRegistry {
	return &clusterRegistry{conns: map[string]*clusterConn{}, options: o}
}

// Start keeps the registry's connections running until ctx ends
// (manager.Runnable).
func (r *clusterRegistry) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx, r.startedAt = ctx, r.options.now()
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, c := range r.conns {
		c.cancel()
		delete(r.conns, name)
	}
	return nil
}

func (r *clusterRegistry) started() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx != nil
}

// NeedLeaderElection: only the leader reconciles, so only it connects.
func (r *clusterRegistry) NeedLeaderElection() bool { return true }

// state is what an environment pass needs of its cluster: the target to
// work in, or why it cannot. pending says that the operator has not heard
// from the cluster yet since it started (no connection within
// connectGrace of the start, or one whose first probe has not answered):
// the pass waits for it and says nothing of the cluster.
func (r *clusterRegistry) state(name string) (t *target, why string, pending bool) {
	r.mu.Lock()
	c, startedAt := r.conns[name], r.startedAt
	r.mu.Unlock()
	if c == nil {
		connecting := startedAt.IsZero() || r.options.now().Sub(startedAt) < connectGrace
		return nil, fmt.Sprintf("workload cluster %s is not connected (no WorkloadCluster %s, or its credentials could not be read)", name, name), connecting
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.probed {
		return nil, fmt.Sprintf("workload cluster %s is connecting", name), true
	}
	if !c.reachable {
		return nil, fmt.Sprintf("workload cluster %s does not answer: %s", name, c.message), false
	}
	return c.target, "", false
}

// probes is a channel of the WorkloadClusters (in namespace) whose new
// connection has its first probe's finding, for a controller's watch. A
// full channel drops the event: the pass it would wake looks again after
// clusterPendingPoll.
func (r *clusterRegistry) probes(namespace string) <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 64)
	r.onProbed = append(r.onProbed, func(name string) {
		select {
		case ch <- event.GenericEvent{Object: &petriv1.WorkloadCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}:
		default:
		}
	})
	return ch
}

// probedFirst tells the registry's listeners that the named cluster's new
// connection has its first probe's finding.
func (r *clusterRegistry) probedFirst(name string) {
	for _, f := range r.onProbed {
		f(name)
	}
}

// connect returns the named cluster's connection for credentials, building
// and starting a new one (and stopping the old) when they changed.
func (r *clusterRegistry) connect(name, credentials string, cfg *rest.Config) (*clusterConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[name]; c != nil {
		if c.credentials == credentials {
			return c, nil
		}
		c.cancel()
		delete(r.conns, name)
	}
	if r.ctx == nil {
		return nil, errors.New("the operator is not started yet")
	}
	cl, err := newWorkloadCluster(r.ctx, cfg, r.options)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	c := &clusterConn{
		name: name, credentials: credentials, cluster: cl, ctx: ctx, cancel: cancel, synced: make(chan struct{}),
		target: &target{name: name, client: cl.GetClient(), apiReader: cl.GetAPIReader(), namespaceCache: cl.GetCache()},
	}
	if r.onConnect != nil {
		if err := r.onConnect(c); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() {
		if err := cl.Start(ctx); err != nil {
			log.FromContext(ctx).Error(err, "Workload cluster's cache stopped", "cluster", name)
		}
	}()
	go func() {
		if cl.GetCache().WaitForCacheSync(ctx) {
			close(c.synced)
		}
	}()
	r.conns[name] = c
	return c, nil
}

// disconnect stops and forgets the named cluster's connection.
func (r *clusterRegistry) disconnect(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[name]; c != nil {
		c.cancel()
		delete(r.conns, name)
	}
}

// probeTimeout bounds one probe of a workload cluster.
const probeTimeout = 5 * time.Second

// probe asks the cluster's API server, with the credentials of its Secret,
// who Petri is there and whether its fences refuse what they must, and waits
// briefly for the connection's cache; it records and returns the finding.
func (c *clusterConn) probe(ctx context.Context, o Options) (reachable bool, reason, message string) {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := checkWorkloadCluster(pctx, c.target, o)
	var notPetri *notPetriError
	switch {
	case err == nil:
		select {
		case <-c.synced:
			reachable, reason, message = true, petriv1.ReasonReachable, reachableMessage(o)
		case <-pctx.Done():
			reason, message = petriv1.ReasonClusterUnreachable, "its cache has not synced"
		}
	case errors.As(err, &notPetri):
		reason, message = petriv1.ReasonCredentialsNotPetri, err.Error()
	case errors.Is(err, ErrFencesMissing):
		reason, message = petriv1.ReasonFencesMissing, err.Error()
	case errors.Is(err, ErrFencesNotEnforced):
		reason, message = petriv1.ReasonFencesNotEnforced, err.Error()
	case apierrors.IsUnauthorized(err):
		reason, message = petriv1.ReasonCredentialsRejected, "the API server refused Petri's credentials (401)"
	case apierrors.IsForbidden(err):
		reason, message = petriv1.ReasonCredentialsRejected, "Petri's identity there lacks the rights the chart's workload-cluster mode grants (403)"
	default:
		reason, message = petriv1.ReasonClusterUnreachable, unreachableMessage(err)
	}
	c.mu.Lock()
	c.reachable, c.reason, c.message, c.probed = reachable, reason, message, true
	c.mu.Unlock()
	return reachable, reason, message
}

// reachableMessage is what a WorkloadCluster's Reachable condition says when
// the probe found nothing wrong: exactly what was checked.
func reachableMessage(o Options) string {
	if o.WithoutFences {
		return fmt.Sprintf("answers with Petri's credentials (%s); fences not checked (--require-fences=false)", OperatorUsername(o.ManagementNamespace))
	}
	return "answers with Petri's credentials, fences in place"
}

// checkWorkloadCluster asks the cluster, through t, who the credentials are
// (a SelfSubjectReview) and requires the operator's ServiceAccount, which
// the fences match; then, unless the operator runs without fences, that the
// fences are in place, agree with the operator's settings, and refuse what
// they must (server-side dry runs). Anything else would let the operator act
// there with rights nothing fences.
func checkWorkloadCluster(ctx context.Context, t *target, o Options) error {
	review := &authenticationv1.SelfSubjectReview{}
	if err := t.client.Create(ctx, review); err != nil {
		return fmt.Errorf("ask who Petri's credentials are (SelfSubjectReview): %w", err)
	}
	want := OperatorUsername(o.ManagementNamespace)
	if got := review.Status.UserInfo.Username; got != want {
		return &notPetriError{got: got, want: want}
	}
	if o.WithoutFences {
		return nil
	}
	if err := VerifyFences(ctx, t.apiReader, o); err != nil {
		return err
	}
	return ProveFences(ctx, t.client, o)
}

// notPetriError is a workload cluster's credentials authenticating as
// another identity than the operator's ServiceAccount.
type notPetriError struct{ got, want string }

func (e *notPetriError) Error() string {
	got := e.got
	if got == "" {
		got = "nobody (anonymous)"
	}
	return fmt.Sprintf("the credentials authenticate as %s, not as %s (the ServiceAccount the chart's workload-cluster mode creates, which the fences match); give a kubeconfig with a token of that ServiceAccount (docs/clusters.md)", got, e.want)
}

// wasProbed reports whether the connection has a probe's finding.
func (c *clusterConn) wasProbed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probed
}

// unreachableMessage says why a request did not get an answer, without
// the request's URL parameters.
func unreachableMessage(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("no answer within %s", probeTimeout)
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Error()
	}
	return err.Error()
}

// newWorkloadCluster builds the connection's cluster: the management
// cluster's cache scoping (Petri's namespace, only what the operator
// created) and the same indexes, and requests counted like the manager's.
func newWorkloadCluster(ctx context.Context, cfg *rest.Config, o Options) (cluster.Cluster, error) {
	cfg = countAPIRequests(rest.CopyConfig(cfg))
	cl, err := cluster.New(cfg, func(co *cluster.Options) {
		co.Scheme = Scheme()
		co.Cache = cacheOptions(o)
		co.Client = clientOptions()
	})
	if err != nil {
		return nil, fmt.Errorf("build workload cluster client: %w", err)
	}
	if err := releasebusy.IndexJobs(ctx, cl.GetFieldIndexer()); err != nil {
		return nil, err
	}
	if err := releasebusy.IndexPods(ctx, cl.GetFieldIndexer()); err != nil {
		return nil, err
	}
	if err := jobwatch.IndexPodsByJob(ctx, cl.GetFieldIndexer()); err != nil {
		return nil, err
	}
	return cl, nil
}

// forCluster is ctx for a pass over env in its cluster: the management
// cluster's for an environment not placed in a workload cluster, the
// workload cluster's target otherwise; why says, when it cannot, why.
func (r *EphemeralEnvironmentReconciler) forCluster(ctx context.Context, env *petriv1.EphemeralEnvironment) (_ context.Context, why string, pending bool) {
	if env.Status.Cluster == "" || r.clusters == nil {
		if env.Status.Cluster != "" {
			return ctx, fmt.Sprintf("workload cluster %s: this operator runs without workload clusters", env.Status.Cluster), false
		}
		return ctx, "", false
	}
	t, why, pending := r.clusters.state(env.Status.Cluster)
	if t == nil {
		return ctx, why, pending
	}
	return log.IntoContext(withTarget(ctx, t), log.FromContext(ctx).WithValues("cluster", t.name)), "", false
}
