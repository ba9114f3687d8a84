package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// setFinalizer adds or removes Petri's finalizer with optimistic
// concurrency. A merge patch carries the whole finalizers list: from an
// object read a moment ago (the cache) it would drop a finalizer someone
// else added since. With the object's resourceVersion in the patch, the API
// server refuses it then (a conflict, retried from a fresh read).
func setFinalizer(ctx context.Context, c client.Client, obj client.Object, present bool) error {
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	if present {
		controllerutil.AddFinalizer(obj, petriv1.Finalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, petriv1.Finalizer)
	}
	return c.Patch(ctx, obj, patch)
}
