package controllers

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
	"github.com/petri-dev/petri/controllers/internal/route"
)

// newClusterRegistry is the registry of the operator's connections to its
// workload clusters, each built by newWorkloadCluster.
func newClusterRegistry(o Options) *clusters.Registry {
	return clusters.NewRegistry(o.Now, func(ctx context.Context, cfg *rest.Config) (cluster.Cluster, error) {
		return newWorkloadCluster(ctx, cfg, o)
	})
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
	t, why, pending := r.clusters.State(env.Status.Cluster)
	if t == nil {
		return ctx, why, pending
	}
	return log.IntoContext(route.With(ctx, t), log.FromContext(ctx).WithValues("cluster", t.Name)), "", false
}
