package controllers

import (
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
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
	if apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionWorkloadsIntact) != nil {
		// Once something was found lost, or the releases were verified.
		out = append(out, petriv1.ConditionWorkloadsIntact)
	}
	if len(env.Spec.SharedWorkloads) > 0 || len(env.Status.SharedWorkloads) > 0 {
		out = append(out, petriv1.ConditionSharedWorkloadsBound)
	}
	return append(out, petriv1.ConditionComponentsDeployed)
}

// summarize computes Ready, Reconciling, Stalled, the phase and
// observedGeneration from the domain conditions, in one place.
func (r *EphemeralEnvironmentReconciler) summarize(env *petriv1.EphemeralEnvironment, p *pass, err error) {
	if !env.DeletionTimestamp.IsZero() {
		env.Status.Phase = petriv1.EnvironmentDeleting
		msg := "tearing down"
		reason := petriv1.ReasonTeardownProgressing
		if p.teardownProblem != "" {
			reason, msg = petriv1.ReasonTeardownFailed, p.teardownProblem
		}
		if p.stalledReason != "" {
			reason, msg = p.stalledReason, p.stalledMessage
			setCondition(env, petriv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		}
		setCondition(env, petriv1.ConditionReady, metav1.ConditionFalse, reason, msg)
		setCondition(env, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonTeardownProgressing, "tearing down")
		return
	}
	if p.stalledReason != "" {
		setCondition(env, petriv1.ConditionStalled, metav1.ConditionTrue, p.stalledReason, p.stalledMessage)
		setCondition(env, petriv1.ConditionReady, metav1.ConditionFalse, p.stalledReason, p.stalledMessage)
		setCondition(env, petriv1.ConditionReconciling, metav1.ConditionFalse, p.stalledReason, p.stalledMessage)
		env.Status.Phase = petriv1.EnvironmentStalled
		env.Status.ObservedGeneration = env.Generation
		return
	}
	if summarizeSleep(env, err) {
		return
	}
	apimeta.RemoveStatusCondition(&env.Status.Conditions, petriv1.ConditionStalled)

	failed, pending := "", ""
	var pendingMsg string
	for _, t := range requiredConditions(env) {
		c := apimeta.FindStatusCondition(env.Status.Conditions, t)
		switch {
		case c == nil || c.ObservedGeneration != env.Generation:
			if pending == "" {
				pending, pendingMsg = petriv1.ReasonProgressing, "waiting for "+t
			}
		case c.Status == metav1.ConditionTrue:
		case strings.HasSuffix(c.Reason, "Failed"):
			if failed == "" {
				failed = c.Reason
				pendingMsg = c.Message
			}
		default:
			if pending == "" {
				pending, pendingMsg = c.Reason, c.Message
			}
		}
	}
	switch {
	case failed != "" && pending == "":
		// Nothing runs any more for this generation: the outcome is final,
		// and only a new generation moves it (Stalled, so kstatus reads Failed).
		setCondition(env, petriv1.ConditionStalled, metav1.ConditionTrue, failed, pendingMsg)
		setCondition(env, petriv1.ConditionReady, metav1.ConditionFalse, failed, pendingMsg)
		setCondition(env, petriv1.ConditionReconciling, metav1.ConditionFalse, failed, pendingMsg)
		env.Status.Phase = petriv1.EnvironmentFailed
		env.Status.ObservedGeneration = env.Generation
	case failed == "" && pending == "" && err == nil:
		setCondition(env, petriv1.ConditionReady, metav1.ConditionTrue, petriv1.ReasonSucceeded, "environment is deployed in "+env.Status.TargetNamespace)
		setCondition(env, petriv1.ConditionReconciling, metav1.ConditionFalse, petriv1.ReasonSucceeded, "")
		env.Status.Phase = petriv1.EnvironmentReady
		env.Status.ObservedGeneration = env.Generation
	default:
		reason, msg := pending, pendingMsg
		if reason == "" {
			reason = failed
		}
		if err != nil && !errors.Is(err, reconcile.TerminalError(nil)) {
			msg = "retrying: " + err.Error()
		}
		setCondition(env, petriv1.ConditionReady, metav1.ConditionFalse, reason, msg)
		setCondition(env, petriv1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
		if apimeta.IsStatusConditionTrue(env.Status.Conditions, petriv1.ConditionNamespaceBound) {
			env.Status.Phase = petriv1.EnvironmentDeploying
		} else {
			env.Status.Phase = petriv1.EnvironmentPending
		}
	}
}

// recordTransitions emits an Event for each condition that changed in a way
// a person looks for in kubectl describe: a Warning whenever a problem's
// status or reason changes, and a Normal event when a condition's status
// flips (NamespaceBound, ComponentsDeployed and Ready turning True, Ready
// turning False for a teardown or a sleep). A condition that appears not yet
// met, or whose progress reason changes while its status stays, is in the
// status and not repeated as an Event: at a thousand environments those
// Events were a third of the operator's writes. The event reason is the
// condition reason.
func (r *EphemeralEnvironmentReconciler) recordTransitions(before, after *petriv1.EphemeralEnvironment) {
	for _, c := range after.Status.Conditions {
		if c.Type == petriv1.ConditionReconciling {
			continue
		}
		old := apimeta.FindStatusCondition(before.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		typ := corev1.EventTypeNormal
		if c.Status != metav1.ConditionTrue && (strings.HasSuffix(c.Reason, "Failed") || c.Reason == petriv1.ReasonNamespaceNotOwned || c.Reason == petriv1.ReasonInvalidSpec) {
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
