package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"
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
	return r.runSidePass(ctx, req.NamespacedName, sidePass{
		body:   r.sleepOrWake,
		failed: "Sleep or wake failed, retrying with backoff",
	})
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
	return r.setupSideController(mgr, "sleep", r, contract.ActionSleep, contract.ActionWake)
}
