package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/summary"
)

// sidePass is one pass of a side controller (sleep and wake, verify) over
// one environment: it holds the environment's lock, skips a cached copy
// older than the operator's last write (the written guard), and leaves
// alone an environment that is being deleted or not yet finalized. It runs
// body on the environment and writes the status once when body changed it.
type sidePass struct {
	// body is the controller's work on the environment.
	body func(context.Context, *petriv1.EphemeralEnvironment, *pass) error
	// conditions: body sets conditions, whose transitions the pass dates by
	// the operator's clock before the write and records as Events after it.
	conditions bool
	// failed is what the log says of a failed pass, retried with backoff.
	failed string
}

func (r *EphemeralEnvironmentReconciler) runSidePass(ctx context.Context, key types.NamespacedName, sp sidePass) (reconcile.Result, error) {
	unlock := r.locks.lock(key)
	defer unlock()
	env := &petriv1.EphemeralEnvironment{}
	if err := r.Get(ctx, key, env); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.Stale(key, env.ResourceVersion) {
		return reconcile.Result{RequeueAfter: staleCachePoll}, nil
	}
	if !env.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(env, petriv1.Finalizer) {
		return reconcile.Result{}, nil
	}
	ctx, why, _ := r.forCluster(ctx, env)
	if why != "" {
		// The main controller says so in the status.
		return reconcile.Result{RequeueAfter: clusterAwayPoll}, nil
	}
	before := env.DeepCopy()
	p := &pass{}
	err := sp.body(ctx, env, p)
	if !equality.Semantic.DeepEqual(before.Status, env.Status) {
		if sp.conditions {
			summary.StampTransitions(before.Status.Conditions, env.Status.Conditions, r.Options.MetaNow())
		}
		if perr := r.Status().Patch(ctx, env, client.MergeFrom(before)); perr != nil && !apierrors.IsNotFound(perr) {
			err = errors.Join(err, fmt.Errorf("patch status: %w", perr))
		}
	}
	if env.ResourceVersion != before.ResourceVersion {
		r.written.Remember(key, env.ResourceVersion)
	}
	if sp.conditions {
		r.recordTransitions(before, env)
	}
	if err != nil {
		log.FromContext(ctx).Info(sp.failed, "error", err.Error())
	}
	return p.result(), err
}

// setupSideController registers rec as the side controller name: it
// watches the environments and the Jobs they own whose action is one of
// actions, when a Job's outcome changes.
func (r *EphemeralEnvironmentReconciler) setupSideController(mgr manager.Manager, name string, rec reconcile.Reconciler, actions ...string) error {
	ownJobs := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return slices.Contains(actions, obj.GetLabels()[contract.LabelAction])
	})
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&petriv1.EphemeralEnvironment{}).
		Owns(&batchv1.Job{}, builder.WithPredicates(ownJobs, jobwatch.OutcomeChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Concurrency}).
		Named(name).
		Build(rec)
	if err != nil {
		return err
	}
	w, err := newClusterWatcher(c, name, actions)
	if err != nil {
		return err
	}
	r.watchers = append(r.watchers, w)
	return nil
}
