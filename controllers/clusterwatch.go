package controllers

import (
	"context"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
)

// indexEnvironmentUID indexes environments by UID: an object in a workload
// cluster names its environment by the UID label only (no owner reference
// can point across clusters).
const indexEnvironmentUID = "uid"

// clusterWatcher is a controller that also hears a workload cluster's
// events once it is connected: the main controller every Job, pod,
// namespace and ServiceAccount event it hears in the management cluster;
// a side controller the events of its Jobs. The main controller also hears
// the cluster's workloads (watchClusterWorkloads).
type clusterWatcher struct {
	events  *clusters.Events
	actions []string // the side controller's Job actions; nil: all of them
}

// newClusterWatcher makes c hear the workload clusters' events, through one
// source whatever the connections to come.
func newClusterWatcher(c controller.Controller, name string, actions []string) (clusterWatcher, error) {
	events := clusters.NewEvents(name)
	if err := c.Watch(events); err != nil {
		return clusterWatcher{}, err
	}
	return clusterWatcher{events: events, actions: actions}, nil
}

// watchCluster registers the connection's events with each watcher.
func (r *EphemeralEnvironmentReconciler) watchCluster(conn *clusters.Conn) error {
	cache := conn.Cluster.GetCache()
	reader := conn.Cluster.GetClient()
	maps := r.maps()
	toEnv := handler.EnqueueRequestsFromMapFunc(maps.environmentOfLabels)
	for _, w := range r.watchers {
		jobPreds := []predicate.Predicate{jobwatch.OutcomeChanged}
		if w.actions != nil {
			actions := w.actions
			jobPreds = append(jobPreds, predicate.NewPredicateFuncs(func(obj client.Object) bool {
				return slices.Contains(actions, obj.GetLabels()[contract.LabelAction])
			}))
		} else {
			jobPreds = append(jobPreds, jobwatch.NotToldByItsPod(reader))
		}
		w.events.Add(conn.Context(), conn.Name, source.Kind[client.Object](cache, &batchv1.Job{}, toEnv, jobPreds...))
		if w.actions != nil {
			continue
		}
		if err := r.watchClusterWorkloads(conn, w.events); err != nil {
			return err
		}
		for _, src := range []source.Source{
			source.Kind[client.Object](cache, &corev1.Pod{}, toEnv, jobwatch.PodSucceededNow),
			source.Kind[client.Object](cache, &corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(namespaceOwner)),
			source.Kind[client.Object](cache, &corev1.ServiceAccount{}, handler.EnqueueRequestsFromMapFunc(maps.environmentOfIdentity)),
		} {
			w.events.Add(conn.Context(), conn.Name, src)
		}
	}
	log.FromContext(context.Background()).Info("Watching workload cluster", "cluster", conn.Name)
	return nil
}

// environmentMaps map the objects the environment controller watches to
// the environments they concern, reading the cached environments.
type environmentMaps struct {
	reader              client.Reader
	managementNamespace string
}

// maps hands the watches the reconciler's cached reader.
func (r *EphemeralEnvironmentReconciler) maps() environmentMaps {
	return environmentMaps{reader: r.Client, managementNamespace: r.Options.ManagementNamespace}
}

// environmentOfLabels maps an object of a workload cluster to its
// environment by the UID label the operator set on it.
func (m environmentMaps) environmentOfLabels(ctx context.Context, obj client.Object) []reconcile.Request {
	uid := obj.GetLabels()[petriv1.LabelEnvironmentUID]
	if uid == "" {
		return nil
	}
	return m.environmentsIndexed(ctx, m.managementNamespace, indexEnvironmentUID, uid)
}

// environmentsOfCluster maps a WorkloadCluster to the environments it
// concerns: those placed in it (its answering or not changes their
// passes) and those waiting for a placement (it may have room now).
func (m environmentMaps) environmentsOfCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	return append(m.environmentsIndexed(ctx, obj.GetNamespace(), clusters.PlacementIndex, obj.GetName()),
		m.environmentsIndexed(ctx, obj.GetNamespace(), clusters.PlacementIndex, clusters.Unplaced)...)
}

// environmentLeftCluster wakes the environments waiting for a placement
// when one leaves a cluster (its room is free).
func (m environmentMaps) environmentLeftCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.(*petriv1.EphemeralEnvironment).Status.Cluster == "" {
		return nil
	}
	return m.environmentsIndexed(ctx, obj.GetNamespace(), clusters.PlacementIndex, clusters.Unplaced)
}

// environmentsIndexed are the requests of the cached environments of
// namespace whose index field has value.
func (m environmentMaps) environmentsIndexed(ctx context.Context, namespace, field, value string) []reconcile.Request {
	var list petriv1.EphemeralEnvironmentList
	if err := m.reader.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{field: value}); err != nil {
		log.FromContext(ctx).Error(err, "List environments by index", "index", field)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, e := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: e.Name}})
	}
	return out
}
