package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
)

// Shared workloads in workload clusters.
//
// An environment binds the shared workloads of its own cluster: a database
// in the management cluster is no use to an environment in east. For each
// workload cluster with environments using a shared workload, the operator
// makes a copy of it in the management namespace, named <name>.<cluster>,
// labelled petri.dev/cluster and controlled by the shared workload it
// copies. A copy is reconciled as any shared workload, in its cluster (the
// pass's target, as an environment's): its namespace, deployer identity,
// instance keys, values Secrets and Jobs are there, and its release keeps
// the name of the shared workload it copies, so bindings render the same
// in every cluster. The copy's spec follows its original's. It stays while
// the original does; deleting the original deletes its copies (each
// undeployed in its cluster) once no environment uses it.

// copyName is the name of a shared workload's copy for a workload cluster.
func copyName(original, cluster string) string { return original + "." + cluster }

// copyOf tells whether sw is a copy the operator made for a workload
// cluster, and which cluster and shared workload.
func copyOf(sw *petriv1.SharedWorkload) (cluster, original string, ok bool) {
	cluster = sw.Labels[petriv1.LabelCluster]
	owner := metav1.GetControllerOf(sw)
	if cluster == "" || owner == nil || owner.Kind != "SharedWorkload" || owner.APIVersion != petriv1.GroupVersion.String() {
		return "", "", false
	}
	return cluster, owner.Name, true
}

// releaseName is the Helm release of a shared workload: its own name, or
// its original's for a copy.
func releaseName(sw *petriv1.SharedWorkload) string {
	if _, original, ok := copyOf(sw); ok {
		return original
	}
	return sw.Name
}

// sharedControlledBy reports whether obj (an instance Secret) is sw's: by
// its owner reference in the management cluster, by the UID label in a
// workload cluster, where it can have none.
func sharedControlledBy(ctx context.Context, obj client.Object, sw *petriv1.SharedWorkload) bool {
	if route.Of(ctx) == nil {
		return metav1.IsControlledBy(obj, sw)
	}
	l := obj.GetLabels()
	return l[LabelSharedWorkloadUID] == string(sw.UID) && l[petriv1.LabelManagedBy] == petriv1.ManagedByOperator
}

// LabelSharedWorkloadUID is set on the objects made in a workload cluster
// for a copy of a shared workload: its UID.
const LabelSharedWorkloadUID = "petri.dev/shared-workload-uid"

// sharedClusterPoll is how soon a copy whose cluster does not answer is
// looked at again (besides the WorkloadCluster's own changes).
const sharedClusterPoll = 30 * time.Second

// inCluster is ctx for a pass over a copy in its workload cluster; why says
// why it cannot be worked on now, pending that the operator has not heard
// from the cluster yet since it started.
func (r *SharedWorkloadReconciler) inCluster(ctx context.Context, cluster string) (_ context.Context, why string, pending bool) {
	if r.clusters == nil {
		return ctx, fmt.Sprintf("workload cluster %s: this operator runs without workload clusters", cluster), false
	}
	t, why, pending := r.clusters.State(cluster)
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
func (r *SharedWorkloadReconciler) ensureCopies(ctx context.Context, sw *petriv1.SharedWorkload, clusters []string) error {
	var copies petriv1.SharedWorkloadList
	if err := r.List(ctx, &copies, client.InNamespace(sw.Namespace), client.HasLabels{petriv1.LabelCluster}); err != nil {
		return fmt.Errorf("list copies of %s: %w", sw.Name, err)
	}
	have := map[string]*petriv1.SharedWorkload{}
	for i := range copies.Items {
		c := &copies.Items[i]
		if cluster, _, ok := copyOf(c); ok && metav1.IsControlledBy(c, sw) {
			have[cluster] = c
		}
	}
	for _, cluster := range clusters {
		c := have[cluster]
		if c == nil {
			c = &petriv1.SharedWorkload{ObjectMeta: metav1.ObjectMeta{
				Namespace: sw.Namespace, Name: copyName(sw.Name, cluster),
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
func (r *SharedWorkloadReconciler) deleteCopies(ctx context.Context, sw *petriv1.SharedWorkload, forced bool) (remaining []string, err error) {
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

// deleteRemote deletes, in a workload cluster, the Jobs (with their pods)
// and Secrets of namespace that carry the labels: objects there have no
// owner reference to a resource of the management cluster, so no garbage
// collector takes them.
func deleteRemote(ctx context.Context, c client.Client, namespace string, labels client.MatchingLabels) error {
	if route.Of(ctx) == nil {
		return nil
	}
	mine := []client.ListOption{client.InNamespace(namespace), labels}
	var jobList batchv1.JobList
	if err := c.List(ctx, &jobList, mine...); err != nil {
		return fmt.Errorf("list jobs in workload cluster: %w", err)
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, mine...); err != nil {
		return fmt.Errorf("list secrets in workload cluster: %w", err)
	}
	objs := make([]client.Object, 0, len(jobList.Items)+len(secrets.Items))
	for i := range jobList.Items {
		objs = append(objs, &jobList.Items[i])
	}
	for i := range secrets.Items {
		objs = append(objs, &secrets.Items[i])
	}
	for _, o := range objs {
		uid := o.GetUID()
		err := c.Delete(ctx, o, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %T %s in workload cluster: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// watchCluster hears the Jobs of the shared workloads' copies in a newly
// connected workload cluster.
func (r *SharedWorkloadReconciler) watchCluster(conn *clusters.Conn) error {
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
func (r *SharedWorkloadReconciler) copyOfLabels(ctx context.Context, cluster string, obj client.Object) []reconcile.Request {
	uid := obj.GetLabels()[LabelSharedWorkloadUID]
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
func (r *SharedWorkloadReconciler) sharedWorkloadsOfCluster(ctx context.Context, obj client.Object) []reconcile.Request {
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

// sharedWorkloadIn is the name of the shared workload an environment binds
// for name: name itself in the management cluster, its copy for the
// environment's workload cluster.
func sharedWorkloadIn(env *petriv1.EphemeralEnvironment, name string) string {
	if env.Status.Cluster == "" {
		return name
	}
	return copyName(name, env.Status.Cluster)
}

// sharedWorkloadToBind reads the shared workload the environment binds for
// name. A missing or deleted one stalls the pass; wait says why the
// binding waits (the copy for its cluster is not made yet).
func (r *EphemeralEnvironmentReconciler) sharedWorkloadToBind(ctx context.Context, env *petriv1.EphemeralEnvironment, name string, p *pass) (_ *petriv1.SharedWorkload, wait string, _ error) {
	sw := &petriv1.SharedWorkload{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, sw); err != nil {
		if apierrors.IsNotFound(err) {
			p.stalled(petriv1.ReasonInvalidSpec, fmt.Sprintf("shared workload %s does not exist in %s", name, env.Namespace))
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("get shared workload %s: %w", name, err)
	}
	if !sw.DeletionTimestamp.IsZero() {
		p.stalled(petriv1.ReasonInvalidSpec, fmt.Sprintf("shared workload %s is being deleted", name))
		return nil, "", nil
	}
	if env.Status.Cluster == "" {
		return sw, "", nil
	}
	original := sw
	sw = &petriv1.SharedWorkload{}
	err := r.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: copyName(name, env.Status.Cluster)}, sw)
	switch {
	case apierrors.IsNotFound(err) || err == nil && !metav1.IsControlledBy(sw, original):
		return nil, fmt.Sprintf("waiting for shared workload %s to be deployed in cluster %s", name, env.Status.Cluster), nil
	case err != nil:
		return nil, "", fmt.Errorf("get shared workload %s of cluster %s: %w", name, env.Status.Cluster, err)
	case !sw.DeletionTimestamp.IsZero():
		p.stalled(petriv1.ReasonInvalidSpec, fmt.Sprintf("shared workload %s of cluster %s is being deleted", name, env.Status.Cluster))
		return nil, "", nil
	}
	return sw, "", nil
}
