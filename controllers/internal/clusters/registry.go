// Package clusters holds the operator's connections to the registered
// workload clusters: for each one a controller-runtime cluster (its own
// client and a cache scoped as the management cluster's), the Target a pass
// works in there, and what the last probe found. The WorkloadCluster
// controller connects, probes and disconnects; the environment and shared
// workload passes ask State for the cluster they work in; Events carries a
// connection's watch events to a controller's queue.
package clusters

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Target is the cluster an environment's workloads live in.
type Target struct {
	// Name is the WorkloadCluster's name.
	Name string
	// Client writes to the cluster and reads from its cache (namespaces,
	// RoleBindings read from its API server, as in the management cluster).
	Client client.Client
	// APIReader reads from its API server.
	APIReader client.Reader
	// NamespaceCache reads its label-selected cache of namespaces.
	NamespaceCache client.Reader
	// Workloads reads the health watch's cache of the Deployments,
	// StatefulSets and DaemonSets of the releases there, ReleaseJobs that
	// of their Jobs; both nil without the health watch.
	Workloads, ReleaseJobs client.Reader
}

// Registry holds the operator's connection to each registered workload
// cluster, built from the credentials of its WorkloadCluster's Secret. The
// WorkloadCluster controller keeps it; the environment passes read it.
type Registry struct {
	// OnConnect registers a new connection's events with the controllers
	// that hear workload clusters; set before the registry starts.
	OnConnect func(*Conn) error

	mu    sync.Mutex
	conns map[string]*Conn
	// ctx lives as long as the manager (Start); connections' caches run
	// under it.
	ctx context.Context
	// onProbed hears the first probe's finding of each connection: the
	// passes that waited for it go on (the WorkloadCluster's status may
	// not change, so its watch would not wake them).
	onProbed []func(name string)
	// startedAt is when the registry started; until connectGrace after
	// it, a cluster not connected yet is one the WorkloadCluster
	// controller has not come to, not one that does not answer.
	startedAt time.Time
	now       func() time.Time
	build     func(context.Context, *rest.Config) (cluster.Cluster, error)
}

// connectGrace is how long after the operator starts a workload cluster it
// has no connection to yet counts as connecting rather than unreachable.
const connectGrace = 30 * time.Second

// PendingPoll is how soon a pass that waits for its cluster's first probe
// looks again, should the probe's wake-up be missed.
const PendingPoll = 5 * time.Second

// Conn is one workload cluster's connection.
type Conn struct {
	// Name is the WorkloadCluster's.
	Name string
	// Cluster is the connection's client and cache; Target the same for a
	// pass.
	Cluster cluster.Cluster
	Target  *Target
	// credentials identifies the Secret's content it was built from.
	credentials string
	// ctx ends when the connection is stopped (cancel): its caches and
	// the controllers' sources of its events end with it.
	ctx    context.Context
	cancel context.CancelFunc
	// synced is closed once its cache has synced, and each of waits
	// said its part has.
	synced chan struct{}
	waits  []func(context.Context) bool

	mu sync.Mutex
	// reachable, reason and message are the last probe's finding; probed
	// says there is one.
	reachable, probed bool
	reason, message   string
}

// NewRegistry is a registry whose time is now and whose connections build
// is given each cluster's credentials.
func NewRegistry(now func() time.Time, build func(context.Context, *rest.Config) (cluster.Cluster, error)) *Registry {
	return &Registry{conns: map[string]*Conn{}, now: now, build: build}
}

// Start keeps the registry's connections running until ctx ends
// (manager.Runnable).
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx, r.startedAt = ctx, r.now()
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

// Started reports whether Start has been called.
func (r *Registry) Started() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx != nil
}

// NeedLeaderElection: only the leader reconciles, so only it connects.
func (r *Registry) NeedLeaderElection() bool { return true }

// State is what an environment pass needs of its cluster: the target to
// work in, or why it cannot. pending says that the operator has not heard
// from the cluster yet since it started (no connection within
// connectGrace of the start, or one whose first probe has not answered):
// the pass waits for it and says nothing of the cluster.
func (r *Registry) State(name string) (t *Target, why string, pending bool) {
	r.mu.Lock()
	c, startedAt := r.conns[name], r.startedAt
	r.mu.Unlock()
	if c == nil {
		connecting := startedAt.IsZero() || r.now().Sub(startedAt) < connectGrace
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
	return c.Target, "", false
}

// Probes is a channel of the WorkloadClusters (in namespace) whose new
// connection has its first probe's finding, for a controller's watch. A
// full channel drops the event: the pass it would wake looks again after
// PendingPoll.
func (r *Registry) Probes(namespace string) <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 64)
	r.onProbed = append(r.onProbed, func(name string) {
		select {
		case ch <- event.GenericEvent{Object: &petriv1.WorkloadCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}:
		default:
		}
	})
	return ch
}

// ProbedFirst tells the registry's listeners that the named cluster's new
// connection has its first probe's finding.
func (r *Registry) ProbedFirst(name string) {
	for _, f := range r.onProbed {
		f(name)
	}
}

// Connect returns the named cluster's connection for credentials, building
// and starting a new one (and stopping the old) when they changed.
func (r *Registry) Connect(name, credentials string, cfg *rest.Config) (*Conn, error) {
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
	cl, err := r.build(r.ctx, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(r.ctx)
	c := &Conn{
		Name: name, credentials: credentials, Cluster: cl, ctx: ctx, cancel: cancel, synced: make(chan struct{}),
		Target: &Target{Name: name, Client: cl.GetClient(), APIReader: cl.GetAPIReader(), NamespaceCache: cl.GetCache()},
	}
	if r.OnConnect != nil {
		if err := r.OnConnect(c); err != nil {
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
		if !cl.GetCache().WaitForCacheSync(ctx) {
			return
		}
		for _, wait := range c.waits {
			if !wait(ctx) {
				return
			}
		}
		close(c.synced)
	}()
	r.conns[name] = c
	return c, nil
}

// Disconnect stops and forgets the named cluster's connection.
func (r *Registry) Disconnect(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[name]; c != nil {
		c.cancel()
		delete(r.conns, name)
	}
}

// Context ends when the connection is stopped.
func (c *Conn) Context() context.Context { return c.ctx }

// Synced is closed once the connection's cache has synced, and what
// WaitFor added.
func (c *Conn) Synced() <-chan struct{} { return c.synced }

// WaitFor adds to what Synced waits for: synced blocks until a part of the
// connection (an informer the cache starts on first use, a cache of its
// own) has synced, and reports whether it did before ctx ended. Only from
// OnConnect: the connection is not started yet.
func (c *Conn) WaitFor(synced func(ctx context.Context) bool) {
	c.waits = append(c.waits, synced)
}

// Record keeps a probe's finding: State answers by it.
func (c *Conn) Record(reachable bool, reason, message string) {
	c.mu.Lock()
	c.reachable, c.reason, c.message, c.probed = reachable, reason, message, true
	c.mu.Unlock()
}

// WasProbed reports whether the connection has a probe's finding.
func (c *Conn) WasProbed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probed
}
