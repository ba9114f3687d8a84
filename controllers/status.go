package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/summary"
)

// pass collects what one reconcile learnt, for the summary and the result.
type pass struct {
	// stop ends the normal path early without an error (waiting).
	stop bool
	// after is the earliest time the environment must be looked at again
	// (a TTL, a backoff); zero when watches suffice.
	after time.Duration
	// stalledReason and stalledMessage are set when progress needs a person.
	stalledReason, stalledMessage string
	// teardownProblem reports a failed teardown step that is being retried.
	teardownProblem string
	// unhealthy names the environment's workloads that do not run
	// (health.go); empty when they all do.
	unhealthy string
}

func (p *pass) requeueAfter(d time.Duration) {
	if d > 0 && (p.after == 0 || d < p.after) {
		p.after = d
	}
}

func (p *pass) stalled(reason, msg string) {
	p.stalledReason, p.stalledMessage = reason, msg
	p.stop = true
}

func (p *pass) result() reconcile.Result {
	return reconcile.Result{RequeueAfter: p.after}
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }

func setCondition(env *petriv1.EphemeralEnvironment, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&env.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: env.Generation,
	})
}

// requiredConditions are the domain conditions that make an environment
// Ready, in the order they are reached.
func requiredConditions(env *petriv1.EphemeralEnvironment) []string {
	out := []string{petriv1.ConditionNamespaceBound}
	if env.Status.Cluster != "" || env.Spec.Placement != nil && env.Status.TargetNamespace == "" {
		// Placed in a workload cluster, or to be.
		out = []string{petriv1.ConditionClusterPlaced, petriv1.ConditionNamespaceBound}
	}
	if apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionWorkloadsIntact) != nil {
		// Once something was found lost, or the releases were verified.
		out = append(out, petriv1.ConditionWorkloadsIntact)
	}
	if len(env.Spec.SharedWorkloads) > 0 || len(env.Status.SharedWorkloads) > 0 {
		out = append(out, petriv1.ConditionSharedWorkloadsBound)
	}
	return append(out, petriv1.ConditionComponentsDeployed)
}

// summarize writes Ready, Reconciling, Stalled, the phase and
// observedGeneration: the verdict of summary.Decide over what the pass
// observed, decided in one place.
func (r *EphemeralEnvironmentReconciler) summarize(env *petriv1.EphemeralEnvironment, p *pass, err error) {
	v := summary.Decide(summary.Observations{
		Generation:      env.Generation,
		Conditions:      env.Status.Conditions,
		Required:        requiredConditions(env),
		Deleting:        !env.DeletionTimestamp.IsZero(),
		TeardownProblem: p.teardownProblem,
		StalledReason:   p.stalledReason, StalledMessage: p.stalledMessage,
		Sleep:          sleepSummary(env),
		Err:            err,
		ReadyBefore:    readyAtThisGeneration(env),
		Namespace:      env.Status.TargetNamespace,
		NamespaceBound: apimeta.IsStatusConditionTrue(env.Status.Conditions, petriv1.ConditionNamespaceBound),
		NotWaitedFor:   notWaitedFor(env),
		Unhealthy:      p.unhealthy,
		DegradedBefore: env.Status.Phase == petriv1.EnvironmentDegraded && env.Status.ObservedGeneration == env.Generation,
	})
	switch v.Stalled {
	case summary.StalledSet:
		setCondition(env, petriv1.ConditionStalled, metav1.ConditionTrue, v.StalledReason, v.StalledMessage)
	case summary.StalledRemoved:
		apimeta.RemoveStatusCondition(&env.Status.Conditions, petriv1.ConditionStalled)
	case summary.StalledRenewed:
		apimeta.RemoveStatusCondition(&env.Status.Conditions, petriv1.ConditionStalled)
		setCondition(env, petriv1.ConditionStalled, metav1.ConditionTrue, v.StalledReason, v.StalledMessage)
	}
	setCondition(env, petriv1.ConditionReady, v.Ready.Status, v.Ready.Reason, v.Ready.Message)
	setCondition(env, petriv1.ConditionReconciling, v.Reconciling.Status, v.Reconciling.Reason, v.Reconciling.Message)
	env.Status.Phase = v.Phase
	if v.Observed {
		env.Status.ObservedGeneration = env.Generation
	}
}

// finishStatus summarises the pass into the status and dates its condition
// transitions by the operator's clock.
func (r *EphemeralEnvironmentReconciler) finishStatus(before, env *petriv1.EphemeralEnvironment, p *pass, err error) {
	r.summarize(env, p, err)
	summary.StampTransitions(before.Status.Conditions, env.Status.Conditions, r.Options.MetaNow())
}

// recordTransitions emits an Event for each condition that changed in a way
// a person looks for in kubectl describe: a Warning whenever a problem's
// status or reason changes, and a Normal event when a condition's status
// flips (NamespaceBound, ComponentsDeployed and Ready turning True, Ready
// turning False for a teardown or a sleep). A condition that appears not yet
// met, or whose progress reason changes while its status stays, is in the
// status and not repeated as an Event: such Events cost a write each and
// tell nothing the status does not (docs/benchmarks.md has the figures).
// A component deployed is in status.components and not an Event of its
// own; ComponentsDeployed turning True in the pass Ready does is told by
// Ready's. The event reason is the condition reason.
func (r *EphemeralEnvironmentReconciler) recordTransitions(before, after *petriv1.EphemeralEnvironment) {
	readyNow := apimeta.IsStatusConditionTrue(after.Status.Conditions, petriv1.ConditionReady) &&
		!apimeta.IsStatusConditionTrue(before.Status.Conditions, petriv1.ConditionReady)
	for _, c := range after.Status.Conditions {
		if c.Type == petriv1.ConditionReconciling || readyNow && c.Type == petriv1.ConditionComponentsDeployed && c.Status == metav1.ConditionTrue {
			continue
		}
		old := apimeta.FindStatusCondition(before.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		typ := corev1.EventTypeNormal
		if c.Status != metav1.ConditionTrue && summary.Of(c.Reason) >= summary.Warning {
			typ = corev1.EventTypeWarning
		}
		if c.Type == petriv1.ConditionStalled && c.Status == metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		if typ == corev1.EventTypeNormal && (old == nil && c.Status != metav1.ConditionTrue || old != nil && old.Status == c.Status) {
			continue
		}
		note := c.Message
		if note == "" {
			note = c.Type + " is " + string(c.Status)
		}
		r.Recorder.Eventf(after, nil, typ, c.Reason, c.Type, "%s", note)
	}
}

// notWaitedFor names the components whose deploys do not wait for their
// workloads (release.wait false).
func notWaitedFor(env *petriv1.EphemeralEnvironment) []string {
	var out []string
	for _, c := range env.Spec.Components {
		if !c.Release.Waits() {
			out = append(out, c.Name)
		}
	}
	return out
}

// readyAtThisGeneration: the environment was Ready for its current
// generation when the pass began.
func readyAtThisGeneration(env *petriv1.EphemeralEnvironment) bool {
	c := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && env.Status.ObservedGeneration == env.Generation
}
