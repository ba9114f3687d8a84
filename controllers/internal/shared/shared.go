// Package shared is a shared workload as the controllers around it see it:
// the name of its release and of its copy for a workload cluster, the
// objects it owns there, its instance Secret, the environments that use it
// (an index), and the changes of it that concern them. The SharedWorkload
// controller and the environments' bindings both read it.
package shared

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// UsedBy are the shared workloads an environment uses: those
// it lists, and those whose binding it still holds (removed from the spec,
// not yet deprovisioned). Both count as users of the shared workload and
// hold its deletion.
func UsedBy(env *petriv1.EphemeralEnvironment) []string {
	out := slices.Clone(env.Spec.SharedWorkloads)
	for _, bs := range env.Status.SharedWorkloads {
		if bs.Phase != petriv1.ComponentUndeployed && !slices.Contains(out, bs.Name) {
			out = append(out, bs.Name)
		}
	}
	return out
}

// UsersIndex indexes environments by the shared workloads they use:
// those they list and those whose binding they still hold (UsedBy).
const UsersIndex = "spec.sharedWorkloads"

// Changed lets through the SharedWorkload events its
// environments act on: created, deleted, its spec (generation) changed, its
// deletion begun, or its status changed in anything but the count of bound
// environments and its latest verification. That count moves with every bind, and without this filter
// each new environment woke every other user of the workload: N
// environments binding cost N² passes.
var Changed = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*petriv1.SharedWorkload)
		n, ok2 := e.ObjectNew.(*petriv1.SharedWorkload)
		if !ok1 || !ok2 {
			return true
		}
		if o.Generation != n.Generation || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) {
			return true
		}
		os, ns := o.Status, n.Status
		os.BoundEnvironments, ns.BoundEnvironments = 0, 0
		// A verification of the release tells the environments nothing
		// until it finds the release lost, which its recovery shows.
		os.Verification, ns.Verification = nil, nil
		return !equality.Semantic.DeepEqual(os, ns)
	},
}
