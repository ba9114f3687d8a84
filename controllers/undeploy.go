package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/graph"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/retry"
)

// undeployComponents uninstalls every release in reverse dependency order:
// a component is undeployed only after everything that depends on it. A
// deploy Job still running finishes first. Failed undeploys are retried with
// backoff and reported; the teardown waits for them.
func (t teardownSteps) undeployComponents(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) (bool, error) {
	name := env.Status.TargetNamespace
	if name == "" {
		return true, nil
	}
	ns := &corev1.Namespace{}
	if err := t.apiReader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			// The releases lived in the namespace; nothing is left to undeploy.
			return true, nil
		}
		return false, fmt.Errorf("get namespace %s: %w", name, err)
	}
	if why, err := t.proofs.check(ctx, ns, env); err != nil {
		return false, err
	} else if why != "" {
		// deleteNamespace reports it; nothing runs in a namespace that is
		// not provably ours.
		return true, nil
	}
	for _, c := range env.Spec.Components {
		componentStatus(env, c.Name)
	}
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		if cs.Phase != petriv1.ComponentDeploying {
			continue
		}
		st, err := t.jobs.observeLive(ctx, p, cs.Job)
		if err != nil {
			return false, err
		}
		if st.Exists && !st.Done {
			cs.Message = "deploy job still running; undeploy waits for it"
			return false, nil
		}
		cs.Phase = petriv1.ComponentDeployed
	}

	// Status entries are the graph: spec components keep their dependencies,
	// components already removed from the spec have none.
	var nodes []graph.Node
	for _, cs := range env.Status.Components {
		n := graph.Node{Name: cs.Name}
		if c := findComponent(env, cs.Name); c != nil {
			n.DependsOn = c.DependsOn
		}
		nodes = append(nodes, n)
	}
	states := map[string]graph.State{}
	var problems []string
	step := func(cs *petriv1.ComponentStatus) error {
		_, err := t.runUndeploy(ctx, env, cs, p)
		var later *retryLater
		if errors.As(err, &later) {
			p.requeueAfter(later.after)
			problems = append(problems, later.msg)
			err = nil
		}
		states[cs.Name] = undeployState(cs.Phase)
		return err
	}
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		states[cs.Name] = undeployState(cs.Phase)
		if cs.Phase == petriv1.ComponentUndeploying {
			if err := step(cs); err != nil {
				return false, err
			}
		}
	}
	for _, n := range graph.Undeployable(nodes, states) {
		if err := step(componentStatus(env, n)); err != nil {
			return false, err
		}
	}
	if len(problems) > 0 {
		p.teardownProblem = "undeploy failed, retrying: " + strings.Join(problems, "; ")
	}
	return graph.Complete(nodes, states, graph.Done), nil
}

func undeployState(p petriv1.ComponentPhase) graph.State {
	switch p {
	case petriv1.ComponentUndeployed:
		return graph.Done
	case petriv1.ComponentUndeploying:
		return graph.Running
	}
	return graph.Waiting
}

// undeployRemoved uninstalls the releases of components that left the spec,
// then forgets them.
func (t teardownSteps) undeployRemoved(ctx context.Context, env *petriv1.EphemeralEnvironment, inSpec map[string]bool, p *pass) error {
	var keep []petriv1.ComponentStatus
	for _, cs := range env.Status.Components {
		if inSpec[cs.Name] {
			keep = append(keep, cs)
			continue
		}
		done, err := t.runUndeploy(ctx, env, &cs, p)
		if err != nil {
			return err
		}
		if !done {
			keep = append(keep, cs)
		}
	}
	env.Status.Components = keep
	return nil
}

// runUndeploy drives one component's undeploy Job; it reports done once the
// release is gone. A failed Job is retried with a new attempt after a backoff,
// a Job that is gone at once.
func (t teardownSteps) runUndeploy(ctx context.Context, env *petriv1.EphemeralEnvironment, cs *petriv1.ComponentStatus, p *pass) (bool, error) {
	if cs.Phase == petriv1.ComponentUndeployed {
		return true, nil
	}
	if cs.Phase == petriv1.ComponentUndeploying {
		done, running, err := t.observeRetried(ctx, env, p, contract.ActionUndeploy, cs.Name, cs.Job, cs.Attempt, &cs.FinishedAt, &cs.LastError)
		if done {
			cs.Phase, cs.Message = petriv1.ComponentUndeployed, ""
			return true, nil
		}
		if running || err != nil {
			var later *retryLater
			if errors.As(err, &later) {
				cs.Message = later.msg
			}
			return false, err
		}
	}
	// An undeploy belongs to the generation it started at: a component
	// removed again after it came back is a new undeploy, whose Jobs must
	// not be the earlier one's (finished, and still kept for their TTL).
	attempt, gen := cs.Attempt+1, cs.Generation
	if cs.Phase != petriv1.ComponentUndeploying {
		attempt, gen = 1, env.Generation
	}
	key := jobs.EnvironmentKey(env, contract.ActionUndeploy, cs.Name, gen)
	key.Attempt = attempt
	jobName := key.Name()
	wait, err := t.jobs.releaseBusy(ctx, env, cs.Name, jobName)
	if err != nil || wait.Busy() {
		if wait.Busy() {
			cs.Message = wait.Waiting()
			p.requeueAfter(jobwatch.UncachedPoll)
		}
		return false, err
	}
	args := []string{"undeploy",
		"--release", cs.Name,
		"--namespace", env.Status.TargetNamespace,
		"--termination-log", jobs.TerminationLogPath,
	}
	if err := t.jobs.create(ctx, env, jobName, jobLabels(env, cs.Name, contract.ActionUndeploy, gen), args, ""); err != nil {
		return false, err
	}
	t.jobs.releaseJobs.Add(env, cs.Name, jobName)
	now := t.options.MetaNow()
	cs.Phase, cs.Job, cs.Attempt, cs.Generation, cs.StartedAt, cs.FinishedAt, cs.LastError = petriv1.ComponentUndeploying, jobName, attempt, gen, &now, nil, ""
	cs.Message = wait.PassedOver()
	if cs.Message != "" {
		t.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonReleaseHolderLost, "Undeploy", "component %s: %s", cs.Name, cs.Message)
	}
	log.FromContext(ctx).Info("Started undeploy job", "component", cs.Name, "job", jobName, "attempt", attempt)
	return false, nil
}

// observeRetried follows a teardown step that runs as one Job per attempt.
// It reports done when the Job succeeded and running while it runs. A failure
// is recorded once (reason, event, metric); until the backoff has passed it
// returns a retryLater error, and afterwards nothing, which tells the caller
// to start the next attempt.
//
// A Job that is gone (the API server does not know it either) was deleted by
// hand, or removed by its TTL while the operator was down: its outcome is
// unknown and nothing will ever report it. The caller starts the next attempt
// at once; the steps are idempotent (an undeploy of an absent release
// succeeds, deprovision steps must tolerate a database already dropped).
func (t teardownSteps) observeRetried(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass, action, subject, job string, attempt int32, finishedAt **metav1.Time, lastError *string) (done, running bool, err error) {
	st, err := t.jobs.observeLive(ctx, p, job)
	if err != nil {
		return false, false, err
	}
	switch {
	case !st.Exists:
		log.FromContext(ctx).Info("Job is gone before its outcome was seen, starting the next attempt", "job", job, "action", action, "subject", subject, "attempt", attempt)
		t.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonTeardownProgressing, action, "%s of %s: job %s is gone before its outcome was seen; starting attempt %d", action, subject, job, attempt+1)
		return false, false, nil
	case !st.Done:
		return false, true, nil
	case st.Succeeded:
		*finishedAt, *lastError = st.Finished, ""
		jobwatch.Record(action, st)
		t.recorder.Eventf(env, nil, corev1.EventTypeNormal, petriv1.ReasonTeardownProgressing, action, "%s of %s succeeded (job %s)", action, subject, job)
		return true, false, nil
	}
	if *lastError == "" || *finishedAt == nil {
		*lastError, *finishedAt = jobs.OneLine(st.Message), st.Finished
		jobwatch.Record(action, st)
		t.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonTeardownFailed, action, "%s of %s failed (attempt %d): %s", action, subject, attempt, *lastError)
	}
	if wait := retry.StepIn(t.options, attempt, *finishedAt); wait > 0 {
		return false, false, &retryLater{after: wait, msg: fmt.Sprintf("%s: %s failed (attempt %d): %s; retrying in %s", subject, action, attempt, *lastError, wait.Round(time.Second))}
	}
	return false, false, nil
}

// retryLater is a failure that is retried after a known delay.
type retryLater struct {
	after time.Duration
	msg   string
}

func (e *retryLater) Error() string { return e.msg }
