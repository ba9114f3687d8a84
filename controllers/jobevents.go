package controllers

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// sharedWorkloadChanged lets through the SharedWorkload events its
// environments act on: created, deleted, its spec (generation) changed, its
// deletion begun, or its status changed in anything but the count of bound
// environments and its latest verification. That count moves with every bind, and without this filter
// each new environment woke every other user of the workload: N
// environments binding cost N² passes.
var sharedWorkloadChanged = predicate.Funcs{
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
