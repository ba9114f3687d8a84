package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/shared"
)

// LabelSharedWorkload names the SharedWorkload an object belongs to, and
// LabelSharedWorkloadUID a copy's objects in a workload cluster
// (controllers/internal/shared).
const (
	LabelSharedWorkload    = shared.LabelSharedWorkload
	LabelSharedWorkloadUID = shared.LabelUID
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

// sharedWorkloadIn is the name of the shared workload an environment binds
// for name: name itself in the management cluster, its copy for the
// environment's workload cluster.
func sharedWorkloadIn(env *petriv1.EphemeralEnvironment, name string) string {
	if env.Status.Cluster == "" {
		return name
	}
	return shared.CopyName(name, env.Status.Cluster)
}

// sharedWorkloadToBind reads the shared workload the environment binds for
// name. A missing or deleted one stalls the pass; wait says why the
// binding waits (the copy for its cluster is not made yet).
func (sb sharedBindings) sharedWorkloadToBind(ctx context.Context, env *petriv1.EphemeralEnvironment, name string, p *pass) (_ *petriv1.SharedWorkload, wait string, _ error) {
	sw := &petriv1.SharedWorkload{}
	if err := sb.client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, sw); err != nil {
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
	err := sb.client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: shared.CopyName(name, env.Status.Cluster)}, sw)
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
