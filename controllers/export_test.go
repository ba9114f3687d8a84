package controllers

import (
	"context"
	"errors"
	"runtime"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/objects"
)

// RequestKind is requestKind, for the table test.
var RequestKind = requestKind

// Cache slimming and the pod index, for their unit tests.
var (
	SlimCachedJob  = slimCachedJob
	SlimCachedPod  = slimCachedPod
	JobPods        = jobwatch.Pods
	IndexJobPods   = jobwatch.PodsIndex
	IndexPodsByJob = jobwatch.IndexPodsByJob
)

// SetFinalizer is objects.SetFinalizer, for its test against the API server.
var SetFinalizer = objects.SetFinalizer

// JobOutcome is what observeJobLive read of a Job, for its test against
// the API server.
type JobOutcome struct {
	Exists, Done, Succeeded, Typed, Retryable bool
	Reason                                    string
	Revision                                  int
}

// ObserveJobLive is observeJobLive, reading the Job through cache first.
func ObserveJobLive(ctx context.Context, cache, api client.Reader, namespace, name string) (JobOutcome, error) {
	st, _, err := jobwatch.ObserveLive(ctx, cache, api, namespace, name)
	return JobOutcome{
		Exists: st.Exists, Done: st.Done, Succeeded: st.Succeeded, Typed: st.Typed, Retryable: st.Retryable(),
		Reason: string(st.Result.Reason), Revision: st.Result.Revision,
	}, err
}

// OperatorNamespace is the namespace the operator creates for env at level,
// and EnsureAdminBinding the RoleBinding it makes and restores there: the
// fences' test makes both as the operator.
func OperatorNamespace(env *petriv1.EphemeralEnvironment, key []byte, level string) *corev1.Namespace {
	return objects.WithPodSecurity(newOwnedNamespace(env, key), level)
}

// EnsureAdminBinding is objects.EnsureAdminBinding.
var EnsureAdminBinding = objects.EnsureAdminBinding

// BindingStaging is the staged binding's name, for the test that stages one
// as an earlier version did.
var BindingStaging = bindingStaging

// WatchRegistry is a registry of workload-cluster connections of its own,
// each of which starts one watch of Jobs as the controllers' connections
// do, for the test that reconnects.
type WatchRegistry struct {
	reg    *clusters.Registry
	events *clusters.Events
	last   *startedSource
}

// startedSource says when it was started: a Kind source may be asked
// whether it synced only then.
type startedSource struct {
	source.SyncingSource
	started chan struct{}
	// conn is the connection's context: a source whose connection ended
	// before it was started never runs.
	conn context.Context
}

func (s *startedSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	err := s.SyncingSource.Start(ctx, q)
	close(s.started)
	return err
}

func (s *startedSource) WaitForSync(ctx context.Context) error {
	select {
	case <-s.started:
	case <-s.conn.Done():
		select {
		case <-s.started:
		default:
			return errors.New("never started: its connection ended first")
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.SyncingSource.WaitForSync(ctx)
}

// NewWatchRegistry starts a registry until ctx ends.
func NewWatchRegistry(ctx context.Context) *WatchRegistry {
	w := &WatchRegistry{reg: newClusterRegistry(DefaultOptions()), events: clusters.NewEvents("test")}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	context.AfterFunc(ctx, q.ShutDown)
	_ = w.events.Start(ctx, q)
	w.reg.OnConnect = func(c *clusters.Conn) error {
		w.last = &startedSource{started: make(chan struct{}), conn: c.Context(), SyncingSource: source.Kind[client.Object](c.Cluster.GetCache(), &batchv1.Job{},
			handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return nil }))}
		w.events.Add(c.Context(), c.Name, w.last)
		return nil
	}
	go func() { _ = w.reg.Start(ctx) }()
	for !w.reg.Started() {
		runtime.Gosched()
	}
	return w
}

// Connect connects the named cluster with credentials and returns how to
// wait for its watch to end: WaitForSync answers once the watch synced or
// gave up, ctx's error while it still waits.
func (w *WatchRegistry) Connect(name, credentials string, cfg *rest.Config) (ended func(context.Context) error, err error) {
	if _, err := w.reg.Connect(name, credentials, cfg); err != nil {
		return nil, err
	}
	return w.last.WaitForSync, nil
}

// Disconnect stops the named cluster's connection.
func (w *WatchRegistry) Disconnect(name string) { w.reg.Disconnect(name) }
