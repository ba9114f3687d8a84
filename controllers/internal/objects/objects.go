// Package objects holds the writes that every controller makes the same
// way: a Job created with the operator's settings, Petri's finalizer set
// or removed under optimistic concurrency, finished Jobs and old values
// Secrets deleted, a namespace put at the Pod Security level, the deployer's
// RoleBinding to admin.
package objects

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/options"
)

// SetFinalizer adds or removes Petri's finalizer with optimistic
// concurrency. A merge patch carries the whole finalizers list: from an
// object read a moment ago (the cache) it would drop a finalizer someone
// else added since. With the object's resourceVersion in the patch, the API
// server refuses it then (a conflict, retried from a fresh read).
func SetFinalizer(ctx context.Context, c client.Client, obj client.Object, present bool) error {
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	if present {
		controllerutil.AddFinalizer(obj, petriv1.Finalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, petriv1.Finalizer)
	}
	return c.Patch(ctx, obj, patch)
}

// CreateJob fills in the Job settings common to every Petri Job and creates
// it in the management namespace; an existing Job of that name is the same
// work, adopted.
func CreateJob(ctx context.Context, c client.Client, o options.Options, spec jobs.Spec) error {
	spec.Namespace = o.ManagementNamespace
	spec.BackoffLimit = o.JobBackoffLimit
	spec.ActiveDeadline = max(spec.ActiveDeadline, o.JobActiveDeadline)
	spec.TTLAfterFinished = o.JobTTLAfterFinished
	spec.Resources = o.JobResources
	if err := c.Create(ctx, jobs.Build(spec)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create job %s: %w", spec.Name, err)
	}
	return nil
}

// AdminClusterRole is what the deployer identity holds, inside the workload
// namespace only.
const AdminClusterRole = "admin"

// EnsureAdminBinding binds a ServiceAccount to the admin ClusterRole in one
// namespace and returns the binding, made now or found. An existing binding
// with another subject is an error, never overwritten.
func EnsureAdminBinding(ctx context.Context, c client.Client, namespace, saNamespace, saName string, labels map[string]string) (*rbacv1.RoleBinding, error) {
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: naming.DeployerRoleBinding, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AdminClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: saName}},
	}
	err := c.Create(ctx, rb)
	if err == nil {
		return rb, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind deployer %s/%s to %s in %s: %w", saNamespace, saName, AdminClusterRole, namespace, err)
	}
	existing := &rbacv1.RoleBinding{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rb), existing); err != nil {
		return nil, fmt.Errorf("get rolebinding %s/%s: %w", namespace, rb.Name, err)
	}
	if existing.RoleRef != rb.RoleRef || len(existing.Subjects) != 1 || existing.Subjects[0] != rb.Subjects[0] {
		return nil, fmt.Errorf("rolebinding %s/%s exists with another role or subject; refusing to change it", namespace, rb.Name)
	}
	return existing, nil
}
