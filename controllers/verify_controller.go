package controllers

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// VerifyReconciler verifies the releases of deployed environments, a
// controller of its own: it watches the environments (their deploy outcome,
// written by the main reconciler) and their verify Jobs, starts the
// periodic verify Job once per --verify-interval, follows every verify Job
// (the one the main pass starts after lost access too), and deploys again
// what a verification found lost (recoverWorkloads), for the main pass to
// pick up. It shares the main reconciler's clients, clock, written guard and
// per-environment lock.
type VerifyReconciler struct {
	*EphemeralEnvironmentReconciler
}

// Reconcile follows the running verify Job and starts the periodic one when
// it is due.
func (r *VerifyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	unlock := r.locks.lock(req.NamespacedName)
	defer unlock()
	env := &petriv1.EphemeralEnvironment{}
	if err := r.Get(ctx, req.NamespacedName, env); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.stale(req.NamespacedName, env.ResourceVersion) {
		return reconcile.Result{RequeueAfter: staleCachePoll}, nil
	}
	if !env.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(env, petriv1.Finalizer) {
		return reconcile.Result{}, nil
	}
	before := env.DeepCopy()
	p := &pass{}
	err := r.verify(ctx, env, p)
	if !equality.Semantic.DeepEqual(before.Status, env.Status) {
		stampTransitions(before.Status.Conditions, env.Status.Conditions, r.Options.metaNow())
		if perr := r.Status().Patch(ctx, env, client.MergeFrom(before)); perr != nil && !apierrors.IsNotFound(perr) {
			err = errors.Join(err, fmt.Errorf("patch status: %w", perr))
		}
	}
	if env.ResourceVersion != before.ResourceVersion {
		r.written.remember(req.NamespacedName, env.ResourceVersion)
	}
	r.recordTransitions(before, env)
	if err != nil {
		log.FromContext(ctx).Info("Verification failed, retrying with backoff", "error", err.Error())
	}
	return p.result(), err
}

// SetupWithManager watches the environments and their verify Jobs.
func (r *VerifyReconciler) SetupWithManager(mgr manager.Manager) error {
	verifyJobs := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.GetLabels()[contract.LabelAction] == contract.ActionVerify
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&petriv1.EphemeralEnvironment{}).
		Owns(&batchv1.Job{}, builder.WithPredicates(verifyJobs, jobOutcomeChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Concurrency}).
		Named("verify").
		Complete(r)
}
