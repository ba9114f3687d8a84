package sharedworkload

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/route"
	"github.com/petri-dev/petri/controllers/internal/shared"
)

// sharedClusterPoll is how soon a copy whose cluster does not answer is
// looked at again (besides the WorkloadCluster's own changes).
const sharedClusterPoll = 30 * time.Second

// inCluster is ctx for a pass over a copy in its workload cluster; why says
// why it cannot be worked on now, pending that the operator has not heard
// from the cluster yet since it started.
func (r *Reconciler) inCluster(ctx context.Context, cluster string) (_ context.Context, why string, pending bool) {
	if r.Clusters == nil {
		return ctx, fmt.Sprintf("workload cluster %s: this operator runs without workload clusters", cluster), false
	}
	t, why, pending := r.Clusters.State(cluster)
	if t == nil {
		return ctx, why, pending
	}
	return log.IntoContext(route.With(ctx, t), log.FromContext(ctx).WithValues("cluster", cluster)), "", false
}

// clustersOfUsers are the workload clusters the environments using the
// shared workload are placed in.
func clustersOfUsers(users []petriv1.EphemeralEnvironment) []string {
	var out []string
	for _, e := range users {
		if c := e.Status.Cluster; c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// ensureCopies makes and updates the shared workload's copy for each
// workload cluster its users are in, and records the clusters it has a
// copy in.
func (r *Reconciler) ensureCopies(ctx context.Context, sw *petriv1.SharedWorkload, clusters []string) error {
	var copies petriv1.SharedWorkloadList
	if err := r.List(ctx, &copies, client.InNamespace(sw.Namespace), client.HasLabels{petriv1.LabelCluster}); err != nil {
		return fmt.Errorf("list copies of %s: %w", sw.Name, err)
	}
	have := map[string]*petriv1.SharedWorkload{}
	for i := range copies.Items {
		c := &copies.Items[i]
		if cluster, _, ok := shared.CopyOf(c); ok && metav1.IsControlledBy(c, sw) {
			have[cluster] = c
		}
	}
	for _, cluster := range clusters {
		c := have[cluster]
		if c == nil {
			c = &petriv1.SharedWorkload{ObjectMeta: metav1.ObjectMeta{
				Namespace: sw.Namespace, Name: shared.CopyName(sw.Name, cluster),
				Labels: map[string]string{petriv1.LabelCluster: cluster, petriv1.LabelManagedBy: petriv1.ManagedByOperator},
			}, Spec: *sw.Spec.DeepCopy()}
			if err := controllerutil.SetControllerReference(sw, c, r.Scheme()); err != nil {
				return err
			}
			if err := r.Create(ctx, c); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create copy of %s for cluster %s: %w", sw.Name, cluster, err)
			}
			log.FromContext(ctx).Info("Shared workload copied for a workload cluster", "cluster", cluster, "copy", c.Name)
			have[cluster] = c
			continue
		}
		if c.DeletionTimestamp.IsZero() && !equality.Semantic.DeepEqual(c.Spec, sw.Spec) {
			c.Spec = *sw.Spec.DeepCopy()
			if err := r.Update(ctx, c); err != nil {
				return fmt.Errorf("update copy %s: %w", c.Name, err)
			}
		}
	}
	sw.Status.Clusters = nil
	for cluster := range have {
		sw.Status.Clusters = append(sw.Status.Clusters, cluster)
	}
	slices.Sort(sw.Status.Clusters)
	return nil
}

// deleteCopies deletes the shared workload's copies (passing on a forced
// deletion); remaining names those not gone yet.
func (r *Reconciler) deleteCopies(ctx context.Context, sw *petriv1.SharedWorkload, forced bool) (remaining []string, err error) {
	var copies petriv1.SharedWorkloadList
	if err := r.List(ctx, &copies, client.InNamespace(sw.Namespace), client.HasLabels{petriv1.LabelCluster}); err != nil {
		return nil, fmt.Errorf("list copies of %s: %w", sw.Name, err)
	}
	for i := range copies.Items {
		c := &copies.Items[i]
		if !metav1.IsControlledBy(c, sw) {
			continue
		}
		remaining = append(remaining, c.Name)
		if forced && c.Annotations[petriv1.AnnotationForceDelete] != "true" {
			patch := client.MergeFrom(c.DeepCopy())
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, petriv1.AnnotationForceDelete, "true")
			if err := r.Patch(ctx, c, patch); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("force deletion of copy %s: %w", c.Name, err)
			}
		}
		if c.DeletionTimestamp.IsZero() {
			uid := c.UID
			if err := r.Delete(ctx, c, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("delete copy %s: %w", c.Name, err)
			}
		}
	}
	slices.Sort(remaining)
	return remaining, nil
}

// WatchCluster hears the Jobs of the shared workloads' copies in a newly
// connected workload cluster.
func (r *Reconciler) WatchCluster(conn *clusters.Conn) error {
	if r.clusterEvents == nil {
		return nil
	}
	toCopy := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		return r.copyOfLabels(ctx, conn.Name, obj)
	})
	r.clusterEvents.Add(conn.Context(), conn.Name, source.Kind[client.Object](conn.Cluster.GetCache(), &batchv1.Job{}, toCopy, jobwatch.OutcomeChanged))
	return nil
}

// copyOfLabels maps an object of a workload cluster to the copy of a
// shared workload it was made for.
func (r *Reconciler) copyOfLabels(ctx context.Context, cluster string, obj client.Object) []reconcile.Request {
	uid := obj.GetLabels()[shared.LabelUID]
	if uid == "" {
		return nil
	}
	var list petriv1.SharedWorkloadList
	if err := r.List(ctx, &list, client.InNamespace(r.Options.ManagementNamespace), client.MatchingLabels{petriv1.LabelCluster: cluster}); err != nil {
		log.FromContext(ctx).Error(err, "List shared workloads of a workload cluster", "cluster", cluster)
		return nil
	}
	for _, sw := range list.Items {
		if string(sw.UID) == uid {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: sw.Namespace, Name: sw.Name}}}
		}
	}
	return nil
}

// sharedWorkloadsOfCluster wakes the copies of a WorkloadCluster: its
// answering or not changes their passes.
func (r *Reconciler) sharedWorkloadsOfCluster(ctx context.Context, obj client.Object) []reconcile.Request {
	var list petriv1.SharedWorkloadList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{petriv1.LabelCluster: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "List shared workloads of a workload cluster", "cluster", obj.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, sw := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sw.Namespace, Name: sw.Name}})
	}
	return out
}
