// Package route sends each request of a pass to the cluster it belongs in:
// the management cluster for Petri's own resources, the pass's workload
// cluster (carried by the context, With) for everything the environment
// runs on.
package route

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
)

// A pass over an environment placed in a workload cluster works in two
// clusters: Petri's own resources (the environment, its status, shared
// workloads, workload clusters) stay in the management cluster, and
// everything the environment runs on (its namespace, RoleBinding, deployer
// ServiceAccount, values Secrets, Jobs and their pods) is in the workload
// cluster. The reconcilers' clients route each request by the object's
// type and the pass's context, which carries the environment's cluster
// (With); a context without one is the management cluster's. The
// code of a pass is the same in both cases.

type targetKey struct{}

// With is ctx for a pass over an environment of cluster t; nil is the
// management cluster.
func With(ctx context.Context, t *clusters.Target) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, targetKey{}, t)
}

// Of is the workload cluster of the pass, or nil.
func Of(ctx context.Context) *clusters.Target {
	t, _ := ctx.Value(targetKey{}).(*clusters.Target)
	return t
}

// ClusterOf names the pass's cluster for messages and logs.
func ClusterOf(ctx context.Context) string {
	if t := Of(ctx); t != nil {
		return t.Name
	}
	return ""
}

// ownObject reports whether obj is one of Petri's own resources, which
// live in the management cluster only.
func ownObject(s *runtime.Scheme, obj runtime.Object) bool {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		if kinds, _, err := s.ObjectKinds(obj); err == nil && len(kinds) > 0 {
			gvk = kinds[0]
		}
	}
	return gvk.Group == petriv1.GroupVersion.Group
}

// Client is a client.Client that sends a request for one of Petri's
// resources, or any request of a pass without a workload cluster, to the
// management cluster, and every other request of a workload cluster's pass
// to that cluster.
type Client struct {
	client.Client
}

func (c Client) pick(ctx context.Context, obj runtime.Object) client.Client {
	if t := Of(ctx); t != nil && !ownObject(c.Scheme(), obj) {
		return t.Client
	}
	return c.Client
}

func (c Client) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.pick(ctx, obj).Get(ctx, key, obj, opts...)
}

func (c Client) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.pick(ctx, list).List(ctx, list, opts...)
}

func (c Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	cl := c.pick(ctx, obj)
	if cl != c.Client {
		remoteOwnership(obj)
	}
	return cl.Create(ctx, obj, opts...)
}

func (c Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.pick(ctx, obj).Delete(ctx, obj, opts...)
}

func (c Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.pick(ctx, obj).Update(ctx, obj, opts...)
}

func (c Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.pick(ctx, obj).Patch(ctx, obj, patch, opts...)
}

func (c Client) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return c.pick(ctx, obj).DeleteAllOf(ctx, obj, opts...)
}

func (c Client) Status() client.SubResourceWriter { return status{c} }

// status routes status writes as Client routes the objects.
type status struct{ c Client }

func (s status) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.c.pick(ctx, obj).Status().Create(ctx, obj, sub, opts...)
}

func (s status) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.pick(ctx, obj).Status().Update(ctx, obj, opts...)
}

func (s status) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.pick(ctx, obj).Status().Patch(ctx, obj, patch, opts...)
}

func (s status) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.c.Client.Status().Apply(ctx, obj, opts...)
}

// Reader routes reads like Client; Pick chooses which of
// the target's readers stands for the management cluster's.
type Reader struct {
	client.Reader
	Scheme *runtime.Scheme
	Pick   func(*clusters.Target) client.Reader
}

func (r Reader) pick(ctx context.Context, obj runtime.Object) client.Reader {
	if t := Of(ctx); t != nil && !ownObject(r.Scheme, obj) {
		if rd := r.Pick(t); rd != nil {
			return rd
		}
	}
	return r.Reader
}

func (r Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return r.pick(ctx, obj).Get(ctx, key, obj, opts...)
}

func (r Reader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.pick(ctx, list).List(ctx, list, opts...)
}

// remoteOwnership replaces the owner references to Petri's resources of an
// object created in a workload cluster: the owner does not exist there, and
// that cluster's garbage collector must not judge the object by it. The
// object's labels (petri.dev/environment-uid) say whose it is, and the
// operator deletes it itself at teardown.
func remoteOwnership(obj client.Object) {
	refs := obj.GetOwnerReferences()
	kept := refs[:0]
	for _, ref := range refs {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == petriv1.GroupVersion.Group {
			continue
		}
		kept = append(kept, ref)
	}
	if len(kept) == 0 {
		kept = nil
	}
	obj.SetOwnerReferences(kept)
}

// ControlledBy reports whether obj is env's: controlled by it in the
// management cluster, or, in a workload cluster (where it cannot have an
// owner reference to it), labelled with its UID by the operator.
func ControlledBy(ctx context.Context, obj client.Object, env *petriv1.EphemeralEnvironment) bool {
	if Of(ctx) == nil {
		return metav1.IsControlledBy(obj, env)
	}
	l := obj.GetLabels()
	return l[petriv1.LabelEnvironmentUID] == string(env.UID) && l[petriv1.LabelManagedBy] == petriv1.ManagedByOperator
}
