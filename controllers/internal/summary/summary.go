// Package summary decides, once, what an environment's domain conditions
// add up to: Ready, Reconciling and Stalled, the phase, whether
// observedGeneration moves, and whether the current generation's outcome is
// final. Pure functions: the reconciler collects the observations, this
// package gives the verdict, the reconciler writes it.
package summary

import (
	"errors"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Severity is how much a condition that is not met matters.
type Severity int

const (
	// Info: progress, or nothing wrong.
	Info Severity = iota
	// Warning: a problem a person should see (an Event of type Warning)
	// that is not an outcome: it waits for a person or is retried.
	Warning
	// Error: a failure that is the generation's outcome once nothing else
	// runs; only a new generation moves it.
	Error
)

// severities are the reasons that are more than Info; every other reason
// is Info.
var severities = map[string]Severity{
	petriv1.ReasonNamespaceBindFailed:   Error,
	petriv1.ReasonDeployFailed:          Error,
	petriv1.ReasonVerifyFailed:          Error,
	petriv1.ReasonBindFailed:            Error,
	petriv1.ReasonTeardownFailed:        Error,
	petriv1.ReasonSleepFailed:           Error,
	petriv1.ReasonWakeFailed:            Error,
	petriv1.ReasonNamespaceNotOwned:     Warning,
	petriv1.ReasonInvalidSpec:           Warning,
	petriv1.ReasonDeployerNotAuthorized: Warning,
	petriv1.ReasonClusterNotFound:       Warning,
	petriv1.ReasonClusterUnreachable:    Warning,
	petriv1.ReasonWorkloadsUnhealthy:    Warning,
}

// Of is the severity of a condition reason.
func Of(reason string) Severity { return severities[reason] }

// Outcome is what the required domain conditions of one generation say.
type Outcome struct {
	// Failed is the reason of the first condition that failed (Error).
	Failed string
	// Pending is the reason of the first condition not met yet and still
	// moving; "Progressing" for one not written for this generation.
	Pending string
	// Message goes with them: the first pending condition's, or the first
	// failed one's when that comes later in the order.
	Message string
}

// Final reports whether no running step changes the outcome any more: every
// condition is met, or failed with nothing left to run.
func (o Outcome) Final() bool { return o.Pending == "" }

// Judge reads the required conditions, in the order they are reached.
func Judge(conditions []metav1.Condition, generation int64, required []string) Outcome {
	var o Outcome
	for _, t := range required {
		c := find(conditions, t)
		switch {
		case c == nil || c.ObservedGeneration != generation:
			if o.Pending == "" {
				o.Pending, o.Message = petriv1.ReasonProgressing, "waiting for "+t
			}
		case c.Status == metav1.ConditionTrue:
		case Of(c.Reason) == Error:
			if o.Failed == "" {
				o.Failed, o.Message = c.Reason, c.Message
			}
		default:
			if o.Pending == "" {
				o.Pending, o.Message = c.Reason, c.Message
			}
		}
	}
	return o
}

func find(conditions []metav1.Condition, t string) *metav1.Condition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}

// Sleep is the summary of an environment that sleeps or is between asleep
// and awake.
type Sleep struct {
	Reason, Message string
	// Reconciling is true while a sleep or wake Job runs, is retried or is
	// to start; false once asleep as asked.
	Reconciling bool
}

// Observations are what one pass collected.
type Observations struct {
	Generation int64
	// Conditions are the environment's conditions; Required are the domain
	// conditions that make it Ready, in the order they are reached.
	Conditions []metav1.Condition
	Required   []string
	// Deleting: the environment is being torn down; TeardownProblem names a
	// failed teardown step that is retried.
	Deleting        bool
	TeardownProblem string
	// StalledReason and StalledMessage are set when progress needs a person.
	StalledReason, StalledMessage string
	// Sleep is set while the environment sleeps or is between asleep and
	// awake.
	Sleep *Sleep
	// Err is the error the pass ended with: a terminal one (invalid spec)
	// or one retried with backoff.
	Err error
	// Namespace is the workload namespace; NamespaceBound whether it is.
	Namespace      string
	NamespaceBound bool
	// ReadyBefore: the environment was Ready for this generation when the
	// pass began.
	ReadyBefore bool
	// NotWaitedFor names the components deployed without waiting for their
	// workloads (release.wait false): Ready says so.
	NotWaitedFor []string
	// Unhealthy names the workloads of the releases that do not run, and
	// why (health.Verdict's message); empty when they all do, or when they
	// are not watched.
	Unhealthy string
	// DegradedBefore: the environment was Degraded for this generation
	// when the pass began.
	DegradedBefore bool
}

// Condition is one condition's status, reason and message.
type Condition struct {
	Status          metav1.ConditionStatus
	Reason, Message string
}

// StalledChange is what happens to the Stalled condition.
type StalledChange int

const (
	// StalledKept leaves Stalled as it is.
	StalledKept StalledChange = iota
	// StalledSet sets Stalled True with the verdict's Stalled reason.
	StalledSet
	// StalledRemoved removes Stalled.
	StalledRemoved
	// StalledRenewed removes Stalled and sets it again, True with the
	// verdict's reason: its lastTransitionTime is the pass's.
	StalledRenewed
)

// Verdict is the summary to write.
type Verdict struct {
	Phase              petriv1.EnvironmentPhase
	Ready, Reconciling Condition
	Stalled            StalledChange
	// StalledReason and StalledMessage go with StalledSet.
	StalledReason, StalledMessage string
	// Observed: observedGeneration becomes the generation, the outcome for
	// it is final.
	Observed bool
}

// Decide turns a pass's observations into the verdict.
func Decide(o Observations) Verdict {
	switch {
	case o.Deleting:
		return deleting(o)
	case o.StalledReason != "":
		return Verdict{
			Phase: petriv1.EnvironmentStalled,
			Ready: notReady(o.StalledReason, o.StalledMessage), Reconciling: Condition{metav1.ConditionFalse, o.StalledReason, o.StalledMessage},
			Stalled: StalledSet, StalledReason: o.StalledReason, StalledMessage: o.StalledMessage,
			Observed: true,
		}
	case o.Sleep != nil:
		return asleep(o)
	}
	out := Judge(o.Conditions, o.Generation, o.Required)
	switch {
	case out.Failed != "" && out.Final():
		// Nothing runs any more for this generation: the outcome is final,
		// and only a new generation moves it (Stalled, so kstatus reads Failed).
		return Verdict{
			Phase: petriv1.EnvironmentFailed,
			Ready: notReady(out.Failed, out.Message), Reconciling: Condition{metav1.ConditionFalse, out.Failed, out.Message},
			Stalled: StalledRenewed, StalledReason: out.Failed, StalledMessage: out.Message,
			Observed: true,
		}
	case out.Failed == "" && out.Final() && o.Err == nil && o.Unhealthy != "":
		return degraded(o, o.Unhealthy)
	case out.Failed == "" && out.Final() && o.Err == nil:
		return Verdict{
			Phase:       petriv1.EnvironmentReady,
			Ready:       Condition{metav1.ConditionTrue, petriv1.ReasonSucceeded, deployedIn(o)},
			Reconciling: Condition{metav1.ConditionFalse, petriv1.ReasonSucceeded, ""},
			Stalled:     StalledRemoved, Observed: true,
		}
	case out.Failed == "" && out.Final() && (o.ReadyBefore || o.DegradedBefore) && !errors.Is(o.Err, reconcile.TerminalError(nil)):
		// A pass that failed (an API call timed out) says nothing about
		// the environment: one that was Ready stays Ready while the pass
		// is retried, and only evidence about it (a condition, its
		// workloads) changes that. Ready flapping would turn into pending
		// statuses on the pull request.
		if o.Unhealthy != "" {
			v := degraded(o, o.Unhealthy)
			v.Reconciling.Message = "retrying: " + o.Err.Error()
			return v
		}
		return Verdict{
			Phase:       petriv1.EnvironmentReady,
			Ready:       Condition{metav1.ConditionTrue, petriv1.ReasonSucceeded, deployedIn(o)},
			Reconciling: Condition{metav1.ConditionTrue, petriv1.ReasonProgressing, "retrying: " + o.Err.Error()},
			Stalled:     StalledRemoved, Observed: true,
		}
	}
	reason, msg := out.Pending, out.Message
	if reason == "" {
		reason = out.Failed
	}
	if reason == "" {
		// Every condition is met but the pass failed: still progressing
		// (a condition's reason may not be empty).
		reason = petriv1.ReasonProgressing
	}
	if o.Err != nil && !errors.Is(o.Err, reconcile.TerminalError(nil)) {
		msg = "retrying: " + o.Err.Error()
	}
	phase := petriv1.EnvironmentPending
	if o.NamespaceBound {
		phase = petriv1.EnvironmentDeploying
	}
	return Verdict{
		Phase: phase,
		Ready: notReady(reason, msg), Reconciling: Condition{metav1.ConditionTrue, reason, msg},
		Stalled: StalledRemoved,
	}
}

// degraded: deployed for this generation, but its workloads do not all
// run. The outcome of the generation is final (nothing is deployed for
// it), yet not the state asked for: Reconciling stays True while the
// operator waits for them to run again, so kstatus reads InProgress, never
// Failed nor Current.
func degraded(o Observations, why string) Verdict {
	return Verdict{
		Phase:       petriv1.EnvironmentDegraded,
		Ready:       notReady(petriv1.ReasonWorkloadsUnhealthy, why),
		Reconciling: Condition{metav1.ConditionTrue, petriv1.ReasonWorkloadsUnhealthy, why},
		Stalled:     StalledRemoved, Observed: true,
	}
}

func deleting(o Observations) Verdict {
	v := Verdict{Phase: petriv1.EnvironmentDeleting, Reconciling: Condition{metav1.ConditionTrue, petriv1.ReasonTeardownProgressing, "tearing down"}}
	reason, msg := petriv1.ReasonTeardownProgressing, "tearing down"
	if o.TeardownProblem != "" {
		reason, msg = petriv1.ReasonTeardownFailed, o.TeardownProblem
	}
	if o.StalledReason != "" {
		reason, msg = o.StalledReason, o.StalledMessage
		v.Stalled, v.StalledReason, v.StalledMessage = StalledSet, reason, msg
	}
	v.Ready = notReady(reason, msg)
	return v
}

// asleep: kstatus reads it as InProgress while a sleep or wake Job runs or a
// failed one is retried (Reconciling True), and as Current once asleep:
// asleep is the state that was asked for, with nothing left to do. Never
// Failed: an asleep environment is not Stalled, whatever its deploy's
// outcome was (that outcome returns with the wake).
func asleep(o Observations) Verdict {
	s := o.Sleep
	v := Verdict{Phase: petriv1.EnvironmentSleeping, Ready: notReady(s.Reason, s.Message), Stalled: StalledRemoved}
	switch {
	case o.Err != nil:
		v.Reconciling = Condition{metav1.ConditionTrue, s.Reason, "retrying: " + o.Err.Error()}
	case s.Reconciling:
		v.Reconciling = Condition{metav1.ConditionTrue, s.Reason, s.Message}
	default:
		v.Reconciling = Condition{metav1.ConditionFalse, s.Reason, s.Message}
		// Asleep only ever follows a final outcome of this generation.
		v.Observed = true
	}
	return v
}

// deployedIn is the message of Ready True: where the environment is, and
// which components it did not wait for.
func deployedIn(o Observations) string {
	msg := "environment is deployed in " + o.Namespace
	if len(o.NotWaitedFor) > 0 {
		msg += "; " + NotWaitedFor(o.NotWaitedFor)
	}
	return msg
}

// NotWaitedFor says which components were deployed without waiting for
// their workloads: "not waited for (release.wait is false): web, api".
func NotWaitedFor(components []string) string {
	return "not waited for (release.wait is false): " + strings.Join(components, ", ")
}

func notReady(reason, msg string) Condition {
	return Condition{metav1.ConditionFalse, reason, msg}
}
