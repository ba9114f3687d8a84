package controllers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/retry"
	"github.com/petri-dev/petri/controllers/internal/summary"
)

// Sleep and wake.
//
// The annotations petri.dev/sleep-requested and petri.dev/wake-requested
// carry the times of the latest requests. The environment should be asleep
// when the sleep request is later than both the wake request and the start
// of the current generation's deploy: a new generation (a push) or a
// redeploy wakes it, and a request that predates the deploy is stale. Ties
// go to awake.
//
// Asleep means its Deployments and StatefulSets are scaled to zero by a sleep
// Job, which runs petri-deployer sleep as the environment's deployer identity
// (the operator writes nothing in workload namespaces); the deployer keeps the
// replica counts on the workloads, and a wake Job restores them. Neither Job
// overlaps a deploy or undeploy Job of the environment: a sleep waits until
// the current generation's deploy graph has a final outcome, and nothing is
// deployed while a sleep or wake Job runs or while the environment sleeps. A
// new generation while asleep is woken first, then deployed.
//
// A failed sleep or wake Job is retried with a new Job after the teardown
// backoff (doubled per attempt, at most five minutes), for as long as the
// same request stands.

// sleepSubject stands for the environment's workloads in the readable part of
// sleep and wake Job names.
const sleepSubject = "workloads"

// sleepWish is what the annotations ask for.
type sleepWish struct {
	asleep bool
	// sleepRequested is the honoured petri.dev/sleep-requested value, when
	// asleep.
	sleepRequested string
	// wakeRequested is the petri.dev/wake-requested value that keeps the
	// environment awake, when it is the reason; empty when there is no sleep
	// request or a deploy started after it.
	wakeRequested string
}

// parseRequest reads a request annotation: an RFC 3339 time (fractions of a
// second allowed). Anything else is no request.
func parseRequest(v string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// wantSleep applies the rule to the environment's annotations and status.
func wantSleep(env *petriv1.EphemeralEnvironment) sleepWish {
	sleepV := env.Annotations[petriv1.AnnotationSleepRequested]
	sleepAt, ok := parseRequest(sleepV)
	if !ok {
		return sleepWish{}
	}
	wakeV := env.Annotations[petriv1.AnnotationWakeRequested]
	if wakeAt, ok := parseRequest(wakeV); ok && !sleepAt.After(wakeAt) {
		return sleepWish{wakeRequested: wakeV}
	}
	start := deployStart(env)
	if start == nil || !sleepAt.After(*start) {
		return sleepWish{}
	}
	return sleepWish{asleep: true, sleepRequested: sleepV}
}

// deployStart is when the current generation's deploy started: nil before
// its first Job (a new generation, a redeploy not yet started). It is
// status.deployStartedAt, to the microsecond, and otherwise (an environment
// deployed by an operator that did not record it) the earliest start of a
// Job of this generation among the spec's components, to the second.
func deployStart(env *petriv1.EphemeralEnvironment) *time.Time {
	var first *time.Time
	for _, cs := range env.Status.Components {
		if cs.Generation != env.Generation || cs.StartedAt == nil || cs.Job == "" || findComponent(env, cs.Name) == nil {
			continue
		}
		if first == nil || cs.StartedAt.Time.Before(*first) {
			first = &cs.StartedAt.Time
		}
	}
	if first != nil && env.Status.DeployStartedAt != nil {
		return &env.Status.DeployStartedAt.Time
	}
	return first
}

// trackDeployStart keeps status.deployStartedAt to the current generation's
// deploy. Called before the deploy graph runs (startedBefore true, so that
// it records nothing) it clears a start that belongs to an earlier deploy and
// reports whether this one has started; called after the graph with that
// report, it records the start of a deploy whose first Job the graph just
// created. (metav1.Time, which the
// components' start times are, keeps whole seconds only: too coarse to order
// a request made in the same second as a deploy.)
func trackDeployStart(env *petriv1.EphemeralEnvironment, startedBefore bool, now metav1.MicroTime) bool {
	started := deployStart(env) != nil
	switch {
	case !started:
		env.Status.DeployStartedAt = nil
	case !startedBefore && env.Status.DeployStartedAt == nil:
		env.Status.DeployStartedAt = &now
	}
	return started
}

// sleepRunning reports whether the latest sleep or wake Job is still running.
func sleepRunning(s *petriv1.SleepStatus) bool {
	return s != nil && s.Job != "" && s.FinishedAt == nil
}

// sleepHolds reports whether the deploy graph waits for sleep or wake:
// while a sleep or wake Job runs, while the environment sleeps as asked (or
// its failed sleep is retried), and, for one that should be awake, until it
// is woken. The sleep controller starts those Jobs; the main pass only waits.
func sleepHolds(env *petriv1.EphemeralEnvironment) bool {
	s := env.Status.Sleep
	if s == nil {
		return false
	}
	if sleepRunning(s) {
		return true
	}
	if wantSleep(env).asleep {
		return s.Action == petriv1.SleepActionSleep
	}
	return s.Action == petriv1.SleepActionSleep || s.LastError != ""
}

// deployFinal reports whether the current generation's deploy graph has an
// outcome that no running Job changes any more: every step done, or failed
// with nothing left to run (the verdict summarize writes).
func deployFinal(env *petriv1.EphemeralEnvironment) bool {
	return summary.Judge(env.Status.Conditions, env.Generation, requiredConditions(env)).Final()
}

// observeSleepJob records the outcome of a running sleep or wake Job.
func (r *SleepReconciler) observeSleepJob(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	s := env.Status.Sleep
	if !sleepRunning(s) {
		return nil
	}
	st, err := r.jobs().observeLive(ctx, p, s.Job)
	if err != nil {
		return err
	}
	reason, failed := petriv1.ReasonSleeping, petriv1.ReasonSleepFailed
	if s.Action == petriv1.SleepActionWake {
		reason, failed = petriv1.ReasonWaking, petriv1.ReasonWakeFailed
	}
	now := r.Options.MetaNow()
	switch {
	case !st.Exists:
		// Deleted by hand, or removed by its TTL while the operator was
		// down: the outcome is unknown; the next attempt finds out (both
		// actions are idempotent).
		s.FinishedAt, s.LastError = &now, fmt.Sprintf("job %s is gone before its outcome was seen", s.Job)
		r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, failed, s.Action, "%s (attempt %d): %s", s.Action, s.Attempt, s.LastError)
	case !st.Done:
		return nil
	case st.Succeeded:
		finished := st.Finished
		if finished == nil {
			finished = &now
		}
		jobwatch.Record(s.Action, st)
		s.FinishedAt, s.LastError = finished, ""
		if asleep := s.Action == petriv1.SleepActionSleep; asleep != s.Asleep {
			s.Asleep, s.Since = asleep, finished
		}
		if s.Action == petriv1.SleepActionSleep {
			log.FromContext(ctx).Info("Asleep", "job", s.Job)
			r.Recorder.Eventf(env, nil, corev1.EventTypeNormal, reason, s.Action,
				"asleep: job %s scaled the Deployments and StatefulSets of %s to zero", s.Job, env.Status.TargetNamespace)
		} else {
			log.FromContext(ctx).Info("Awake", "job", s.Job)
			r.Recorder.Eventf(env, nil, corev1.EventTypeNormal, reason, s.Action,
				"awake: job %s restored the replicas of %s", s.Job, env.Status.TargetNamespace)
		}
	default:
		finished := st.Finished
		if finished == nil {
			finished = &now
		}
		jobwatch.Record(s.Action, st)
		s.FinishedAt, s.LastError = finished, jobs.OneLine(st.Message)
		r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, failed, s.Action, "%s failed (attempt %d, job %s): %s", s.Action, s.Attempt, s.Job, s.LastError)
	}
	return nil
}

// startSleepJob starts the sleep or wake Job that answers wish. The same
// request after a failure is the next attempt, after the backoff; another
// request starts at attempt 1. It starts nothing while a deploy or undeploy
// Job of the environment is unfinished on the API server.
func (r *SleepReconciler) startSleepJob(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass, action string, wish sleepWish) error {
	if env.Status.Sleep == nil {
		env.Status.Sleep = &petriv1.SleepStatus{}
	}
	s := env.Status.Sleep
	sleepRequested, wakeRequested := s.SleepRequested, s.WakeRequested
	if action == petriv1.SleepActionSleep {
		sleepRequested = wish.sleepRequested
	} else {
		wakeRequested = wish.wakeRequested
	}
	attempt := int32(1)
	if s.Action == action && s.SleepRequested == sleepRequested && s.WakeRequested == wakeRequested && s.Job != "" {
		// The same request again: a failed (or lost) attempt.
		attempt = s.Attempt + 1
		if wait := retry.StepIn(r.Options, s.Attempt, s.FinishedAt); wait > 0 {
			p.requeueAfter(wait)
			return nil
		}
	}
	if busy, err := r.helmBusy(ctx, env); err != nil || busy != "" {
		if busy != "" {
			p.requeueAfter(jobwatch.UncachedPoll)
		}
		return err
	}

	gen := env.Generation
	// The request goes into the name: each one gets Jobs of its own, and
	// the attempt gives each retry one. A wake names the sleep it undoes,
	// and "deploy" when a deploy, not an annotation, wakes the environment.
	key := jobs.EnvironmentKey(env, action, sleepSubject, gen)
	key.Attempt, key.Sleep = attempt, &naming.SleepRequest{Requested: sleepRequested}
	if action == petriv1.SleepActionWake {
		key.Sleep.WokenBy = wakeRequested
		if key.Sleep.WokenBy == "" {
			key.Sleep.WokenBy = "deploy"
		}
	}
	name := key.Name()
	l := ownedLabels(env)
	l[contract.LabelAction] = action
	l[contract.LabelGeneration] = strconv.FormatInt(gen, 10)
	args := []string{action, "--namespace", env.Status.TargetNamespace, "--termination-log", jobs.TerminationLogPath}
	if action == petriv1.SleepActionWake {
		args = append(args, wakeWaitArgs(env)...)
	}
	if err := r.jobs().create(ctx, env, name, l, args, ""); err != nil {
		return err
	}
	now := r.Options.MetaNow()
	*s = petriv1.SleepStatus{
		Asleep: s.Asleep, Since: s.Since,
		SleepRequested: sleepRequested, WakeRequested: wakeRequested,
		Action: action, Job: name, Generation: gen, Attempt: attempt, StartedAt: &now,
	}
	p.stop = true
	log.FromContext(ctx).Info("Started "+action+" job", "job", name, "attempt", attempt, "sleepRequested", sleepRequested, "wakeRequested", wakeRequested)
	return nil
}

// wakeWaitArgs make a wake promise what the deploy promised: when a
// component deploys with wait, the wake Job waits until the namespace's
// workloads are ready, within the longest of those components' timeouts.
func wakeWaitArgs(env *petriv1.EphemeralEnvironment) []string {
	var timeout time.Duration
	for _, c := range env.Spec.Components {
		if !c.Release.Waits() {
			continue
		}
		t := 5 * time.Minute
		if c.Release.Timeout != nil {
			t = c.Release.Timeout.Duration
		}
		timeout = max(timeout, t)
	}
	if timeout == 0 {
		return nil
	}
	return []string{"--wait", "--timeout", timeout.String()}
}

// helmBusy names an unfinished deploy or undeploy Job of the environment, as
// the API server knows it; "" when there is none.
func (r *SleepReconciler) helmBusy(ctx context.Context, env *petriv1.EphemeralEnvironment) (string, error) {
	helm, err := labels.NewRequirement(contract.LabelAction, selection.In, []string{contract.ActionDeploy, contract.ActionUndeploy})
	if err != nil {
		return "", err
	}
	sel := labels.SelectorFromSet(labels.Set{petriv1.LabelEnvironmentUID: string(env.UID)}).Add(*helm)
	var list batchv1.JobList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(r.Options.ManagementNamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return "", fmt.Errorf("list deploy jobs of %s: %w", env.Name, err)
	}
	for i := range list.Items {
		if done, _, _ := jobs.Finished(&list.Items[i]); !done {
			return list.Items[i].Name, nil
		}
	}
	return "", nil
}

// sleepSummary is what Ready and Reconciling say of an environment that
// sleeps or is between asleep and awake; nil for an awake one, which is
// summarised from its deploy as always.
func sleepSummary(env *petriv1.EphemeralEnvironment) *summary.Sleep {
	s := env.Status.Sleep
	if s == nil {
		return nil
	}
	ns := env.Status.TargetNamespace
	switch {
	case sleepRunning(s) && s.Action == petriv1.SleepActionSleep:
		return &summary.Sleep{Reason: petriv1.ReasonSleeping, Reconciling: true, Message: fmt.Sprintf("going to sleep: job %s scales the Deployments and StatefulSets of %s to zero", s.Job, ns)}
	case sleepRunning(s):
		return &summary.Sleep{Reason: petriv1.ReasonWaking, Reconciling: true, Message: fmt.Sprintf("waking up: job %s restores the replicas of %s", s.Job, ns)}
	case s.LastError != "" && s.Action == petriv1.SleepActionSleep:
		return &summary.Sleep{Reason: petriv1.ReasonSleepFailed, Reconciling: true, Message: fmt.Sprintf("sleep failed (attempt %d, job %s): %s; retrying", s.Attempt, s.Job, s.LastError)}
	case s.LastError != "":
		return &summary.Sleep{Reason: petriv1.ReasonWakeFailed, Reconciling: true, Message: fmt.Sprintf("wake failed (attempt %d, job %s): %s; retrying", s.Attempt, s.Job, s.LastError)}
	case s.Action == petriv1.SleepActionSleep && !wantSleep(env).asleep:
		// To be woken; the wake Job has not started yet.
		return &summary.Sleep{Reason: petriv1.ReasonWaking, Reconciling: true, Message: fmt.Sprintf("waking up: the wake Job of %s starts once nothing else runs for the environment", ns)}
	case s.Action == petriv1.SleepActionSleep:
		since := ""
		if s.Since != nil {
			since = " since " + s.Since.UTC().Format(time.RFC3339)
		}
		return &summary.Sleep{Reason: petriv1.ReasonSleeping, Message: fmt.Sprintf("asleep%s: the Deployments and StatefulSets of %s are scaled to zero; kubectl petri wake %s (or a new %s) wakes it",
			since, ns, env.Name, petriv1.AnnotationWakeRequested)}
	}
	return nil
}
