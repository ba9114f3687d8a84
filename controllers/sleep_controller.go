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

// SleepReconciler puts environments to sleep and wakes them, a controller
// of its own: it watches the environments (their requests, and the deploy
// outcome the main reconciler writes) and their sleep and wake Jobs, and
// writes status.sleep. The main pass only waits while status.sleep holds
// the deploy graph (sleepHolds). It shares the main reconciler's clients,
// clock, written guard and per-environment lock.
type SleepReconciler struct {
	*EphemeralEnvironmentReconciler
}

// Reconcile follows the sleep or wake Job and starts the one the
// environment's requests ask for.
func (r *SleepReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
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
	err := r.sleepOrWake(ctx, env, p)
	if !equality.Semantic.DeepEqual(before.Status, env.Status) {
		if perr := r.Status().Patch(ctx, env, client.MergeFrom(before)); perr != nil && !apierrors.IsNotFound(perr) {
			err = errors.Join(err, fmt.Errorf("patch status: %w", perr))
		}
	}
	if env.ResourceVersion != before.ResourceVersion {
		r.written.remember(req.NamespacedName, env.ResourceVersion)
	}
	if err != nil {
		log.FromContext(ctx).Info("Sleep or wake failed, retrying with backoff", "error", err.Error())
	}
	return p.result(), err
}

// sleepOrWake records the outcome of a running sleep or wake Job and starts
// the next one: a wake for an environment that sleeps (or slept partly, or
// failed to wake) but should be awake, a sleep again after a failed one, and
// the sleep of an awake environment that should sleep once its current
// generation's deploy graph has a final outcome.
func (r *SleepReconciler) sleepOrWake(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	if err := r.observeSleepJob(ctx, env, p); err != nil {
		return err
	}
	s := env.Status.Sleep
	if sleepRunning(s) {
		return nil
	}
	wish := wantSleep(env)
	asleep := s != nil && s.Action == petriv1.SleepActionSleep
	switch {
	case wish.asleep && asleep && s.LastError == "":
		// Asleep as asked: the deploy graph had a final outcome before the
		// sleep, and nothing has changed it since (that would have woken it).
		return nil
	case wish.asleep && asleep:
		return r.startSleepJob(ctx, env, p, petriv1.SleepActionSleep, wish)
	case !wish.asleep && s != nil && (asleep || s.LastError != ""):
		return r.startSleepJob(ctx, env, p, petriv1.SleepActionWake, wish)
	case wish.asleep && deployFinal(env):
		return r.startSleepJob(ctx, env, p, petriv1.SleepActionSleep, wish)
	}
	return nil
}

// SetupWithManager watches the environments and their sleep and wake Jobs.
func (r *SleepReconciler) SetupWithManager(mgr manager.Manager) error {
	sleepJobs := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		a := obj.GetLabels()[contract.LabelAction]
		return a == contract.ActionSleep || a == contract.ActionWake
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&petriv1.EphemeralEnvironment{}).
		Owns(&batchv1.Job{}, builder.WithPredicates(sleepJobs, jobOutcomeChanged)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Concurrency}).
		Named("sleep").
		Complete(r)
}
