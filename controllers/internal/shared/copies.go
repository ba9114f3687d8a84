package shared

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
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

// CopyName is the name of a shared workload's copy for a workload cluster.
func CopyName(original, cluster string) string { return original + "." + cluster }

// CopyOf tells whether sw is a copy the operator made for a workload
// cluster, and which cluster and shared workload.
func CopyOf(sw *petriv1.SharedWorkload) (cluster, original string, ok bool) {
	cluster = sw.Labels[petriv1.LabelCluster]
	owner := metav1.GetControllerOf(sw)
	if cluster == "" || owner == nil || owner.Kind != "SharedWorkload" || owner.APIVersion != petriv1.GroupVersion.String() {
		return "", "", false
	}
	return cluster, owner.Name, true
}

// ReleaseName is the Helm release of a shared workload: its own name, or
// its original's for a copy.
func ReleaseName(sw *petriv1.SharedWorkload) string {
	if _, original, ok := CopyOf(sw); ok {
		return original
	}
	return sw.Name
}

// ControlledBy reports whether obj (an instance Secret) is sw's: by
// its owner reference in the management cluster, by the UID label in a
// workload cluster, where it can have none.
func ControlledBy(ctx context.Context, obj client.Object, sw *petriv1.SharedWorkload) bool {
	if route.Of(ctx) == nil {
		return metav1.IsControlledBy(obj, sw)
	}
	l := obj.GetLabels()
	return l[LabelUID] == string(sw.UID) && l[petriv1.LabelManagedBy] == petriv1.ManagedByOperator
}

// LabelUID is set on the objects made in a workload cluster
// for a copy of a shared workload: its UID.
const LabelUID = "petri.dev/shared-workload-uid"

// DeleteRemote deletes, in a workload cluster, the Jobs (with their pods)
// and Secrets of namespace that carry the labels: objects there have no
// owner reference to a resource of the management cluster, so no garbage
// collector takes them.
func DeleteRemote(ctx context.Context, c client.Client, namespace string, labels client.MatchingLabels) error {
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
