package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/petri-dev/petri/api/contract"
)

// VerifyReconciler verifies the releases of deployed environments, a
// controller of its own: it watches the environments (their deploy outcome,
// written by the main reconciler) and their verify Jobs, starts the
// periodic verify Job once per --verify-interval, follows every verify Job
// (the one the main pass starts after lost access too), and deploys again
// what a verification found lost (workloadRecovery.recover), for the main pass to
// pick up. It shares the main reconciler's clients, clock, written guard and
// per-environment lock.
type VerifyReconciler struct {
	*EphemeralEnvironmentReconciler
}

// Reconcile follows the running verify Job and starts the periodic one when
// it is due.
func (r *VerifyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return r.runSidePass(ctx, req.NamespacedName, sidePass{
		body:       r.verify,
		conditions: true,
		failed:     "Verification failed, retrying with backoff",
	})
}

// SetupWithManager watches the environments and their verify Jobs.
func (r *VerifyReconciler) SetupWithManager(mgr manager.Manager) error {
	return r.setupSideController(mgr, "verify", r, contract.ActionVerify)
}
