package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/graph"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
	"github.com/petri-dev/petri/controllers/internal/summary"
	"github.com/petri-dev/petri/controllers/internal/values"
)

// deployGraph runs an environment's deploy graph: it observes the deploy
// Jobs, schedules retries of the failed ones, and starts every component
// whose dependencies are ready.
type deployGraph struct {
	client    client.Client
	recorder  events.EventRecorder
	options   Options
	jobs      jobRunner
	retries   retrySchedule
	teardowns teardownSteps
}

// graph hands the deploy step the reconciler's parts it needs.
func (r *EphemeralEnvironmentReconciler) graph() deployGraph {
	return deployGraph{
		client: r.Client, recorder: r.Recorder, options: r.Options,
		jobs: r.jobs(), retries: r.retries(), teardowns: r.teardowns(),
	}
}

// deploy runs the deploy graph for the current generation: it waits for Jobs
// of an older generation, observes this generation's Jobs, starts every
// component whose dependencies are deployed, and summarises the outcome in
// ComponentsDeployed.
func (g deployGraph) deploy(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	inSpec := map[string]bool{}
	for _, c := range env.Spec.Components {
		inSpec[c.Name] = true
		componentStatus(env, c.Name)
	}
	inFlight, err := g.newGeneration(ctx, env, inSpec, p)
	if err != nil {
		return err
	}
	if len(inFlight) > 0 {
		setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployProgressing,
			"waiting for Jobs of an older generation to finish: "+strings.Join(inFlight, ", "))
		return nil
	}
	if err := g.teardowns.undeployRemoved(ctx, env, inSpec, p); err != nil {
		return err
	}
	if err := g.observeDeploys(ctx, env, inSpec, p); err != nil {
		return err
	}
	g.retries.due(ctx, env, p)
	return g.startStartable(ctx, env, p)
}

// newGeneration moves the components of an older generation to the current
// one: Pending when in the spec, Deployed-and-to-be-undeployed when removed.
// A Job of an older generation still running keeps the new graph from
// starting (two Helm operations on one release never overlap); those Jobs
// are returned. The cache alone cannot say a Job has ended (one created a
// moment ago may not be in it yet), so a Job it does not know is looked up
// on the API server.
func (g deployGraph) newGeneration(ctx context.Context, env *petriv1.EphemeralEnvironment, inSpec map[string]bool, p *pass) ([]string, error) {
	gen := env.Generation
	var inFlight []string
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		if cs.Generation == gen {
			continue
		}
		if cs.Job != "" && (cs.Phase == petriv1.ComponentDeploying || cs.Phase == petriv1.ComponentUndeploying) {
			st, err := g.jobs.observeLive(ctx, p, cs.Job)
			if err != nil {
				return nil, err
			}
			if st.Exists && !st.Done {
				inFlight = append(inFlight, cs.Job)
				continue
			}
		}
		if inSpec[cs.Name] {
			*cs = petriv1.ComponentStatus{Name: cs.Name, Phase: petriv1.ComponentPending, Generation: gen}
		} else if cs.Phase != petriv1.ComponentUndeploying {
			// Removed from the spec: its release is undeployed.
			*cs = petriv1.ComponentStatus{Name: cs.Name, Phase: petriv1.ComponentDeployed, Generation: gen, Message: "removed from the spec"}
		}
	}
	return inFlight, nil
}

// observeDeploys records the outcome of this generation's running deploy
// Jobs: the revision a success made, or a failure and its next attempt.
func (g deployGraph) observeDeploys(ctx context.Context, env *petriv1.EphemeralEnvironment, inSpec map[string]bool, p *pass) error {
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		if !inSpec[cs.Name] || cs.Phase != petriv1.ComponentDeploying {
			continue
		}
		st, err := g.jobs.observeLive(ctx, p, cs.Job)
		if err != nil {
			return err
		}
		switch {
		case !st.Exists:
			// Deleted behind our back: starting it again is safe, the
			// name is deterministic.
			cs.Phase = petriv1.ComponentPending
		case st.Done && st.Succeeded:
			cs.Phase, cs.FinishedAt, cs.LastError, cs.Message = petriv1.ComponentDeployed, st.Finished, "", ""
			if c := findComponent(env, cs.Name); c != nil && !c.Release.Waits() {
				// Deployed is all it says: its pods may not run.
				cs.Message = petriv1.NotWaitedFor
			}
			cs.Revision = int32(st.Result.Revision)
			jobwatch.Record(contract.ActionDeploy, st)
			g.pruneComponentValues(ctx, env, cs)
		case st.Done:
			cs.Phase, cs.FinishedAt, cs.LastError = petriv1.ComponentFailed, st.Finished, jobs.OneLine(st.Message)
			jobwatch.Record(contract.ActionDeploy, st)
			g.retries.schedule(env, cs, st.Retryable())
		}
	}
	return nil
}

// startStartable starts every component whose dependencies are deployed and
// whose bindings are ready, says of every other pending one what it waits
// for, and summarises the graph in ComponentsDeployed.
func (g deployGraph) startStartable(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	nodes := nodes(env)
	states := map[string]graph.State{}
	for _, c := range env.Spec.Components {
		states[c.Name] = componentGraphState(componentStatus(env, c.Name))
	}
	bindingFailed := map[string]bool{}
	var startable []string
	for _, name := range graph.Startable(nodes, states) {
		if blocker, failed := bindingBlocker(env, name); blocker != "" {
			componentStatus(env, name).Message = blocker
			if failed {
				// It can never start in this generation: its dependants are
				// blocked too, and the outcome can become final.
				states[name] = graph.Failed
				bindingFailed[name] = true
			}
			continue
		}
		startable = append(startable, name)
	}
	// Components that do not depend on one another start together: their
	// Jobs' requests go out at once, not one component after the other
	// (a pass's requests are most of an environment's way to its first
	// Jobs; docs/benchmarks.md). What they found is recorded in the
	// graph's order.
	launches := g.launchDeploys(ctx, env, startable)
	var errs []error
	for _, l := range launches {
		started, err := g.recordLaunch(ctx, env, l, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if started {
			states[l.component] = graph.Running
		} else {
			// The API server may have refused its Job: a failed attempt.
			states[l.component] = componentGraphState(componentStatus(env, l.component))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	blocked := graph.Blocked(nodes, states)
	for _, c := range env.Spec.Components {
		cs := componentStatus(env, c.Name)
		if cs.Phase != petriv1.ComponentPending || bindingFailed[c.Name] {
			continue
		}
		if b, ok := blocked[c.Name]; ok {
			cs.Message = fmt.Sprintf("blocked: depends on %s, which failed", b)
		} else if waits := pendingDeps(c, states); len(waits) > 0 {
			cs.Message = "waiting for " + strings.Join(waits, ", ")
		}
	}
	summarizeComponents(env, states, blocked)
	return nil
}

func pendingDeps(c petriv1.Component, states map[string]graph.State) []string {
	var out []string
	for _, d := range c.DependsOn {
		if states[d] != graph.Done {
			out = append(out, d)
		}
	}
	return out
}

// summarizeComponents writes ComponentsDeployed from the component states.
func summarizeComponents(env *petriv1.EphemeralEnvironment, states map[string]graph.State, blocked map[string]string) {
	var running, failed, waiting, retries []string
	for _, c := range env.Spec.Components {
		cs := componentStatus(env, c.Name)
		switch states[c.Name] {
		case graph.Running:
			if retrying(cs) {
				retries = append(retries, fmt.Sprintf("%s (attempt %d failed: %s; next attempt at %s)", c.Name, cs.Attempt, cs.LastError, cs.NextRetryAt.UTC().Format(time.RFC3339)))
				continue
			}
			running = append(running, c.Name)
		case graph.Failed:
			why := cs.LastError
			if cs.Phase == petriv1.ComponentPending {
				why = cs.Message
			}
			failed = append(failed, fmt.Sprintf("%s (%s)", c.Name, why))
		case graph.Waiting:
			if _, ok := blocked[c.Name]; !ok {
				waiting = append(waiting, c.Name)
			}
		}
	}
	for _, cs := range env.Status.Components {
		if cs.Phase == petriv1.ComponentUndeploying {
			running = append(running, cs.Name+" (undeploying)")
		}
	}
	switch {
	case len(running) > 0 || len(waiting) > 0 || len(retries) > 0:
		msg := ""
		if len(retries) > 0 {
			msg = "retrying: " + strings.Join(retries, "; ")
		}
		if len(running) > 0 {
			msg = strings.TrimPrefix(msg+"; running: "+strings.Join(running, ", "), "; ")
		}
		if len(waiting) > 0 {
			msg = strings.TrimPrefix(msg+"; waiting: "+strings.Join(waiting, ", "), "; ")
		}
		reason := petriv1.ReasonDeployProgressing
		if len(running) == 0 && len(retries) > 0 {
			reason = petriv1.ReasonDeployRetrying
		}
		setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, reason, msg)
	case len(failed) > 0:
		msg := "failed: " + strings.Join(failed, "; ")
		if len(blocked) > 0 {
			var names []string
			for n := range blocked {
				names = append(names, n)
			}
			slices.Sort(names)
			msg += "; not started: " + strings.Join(names, ", ")
		}
		setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployFailed, msg)
	default:
		msg := fmt.Sprintf("%d components deployed", len(env.Spec.Components))
		if names := notWaitedFor(env); len(names) > 0 {
			msg += "; " + summary.NotWaitedFor(names)
		}
		setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionTrue, petriv1.ReasonDeploySucceeded, msg)
	}
}

// componentGraphState is a component's state in the deploy graph: one that
// failed and waits for its next attempt still runs, as far as its dependants
// and the outcome are concerned.
func componentGraphState(cs *petriv1.ComponentStatus) graph.State {
	if retrying(cs) {
		return graph.Running
	}
	return graphState(cs.Phase)
}

func graphState(p petriv1.ComponentPhase) graph.State {
	switch p {
	case petriv1.ComponentDeploying, petriv1.ComponentUndeploying:
		return graph.Running
	case petriv1.ComponentDeployed, petriv1.ComponentUndeployed:
		return graph.Done
	case petriv1.ComponentFailed:
		return graph.Failed
	}
	return graph.Waiting
}

// componentStatus returns the status entry of a component, adding a Pending
// one for the current generation when there is none.
func componentStatus(env *petriv1.EphemeralEnvironment, name string) *petriv1.ComponentStatus {
	if cs := findComponentStatus(env, name); cs != nil {
		return cs
	}
	env.Status.Components = append(env.Status.Components, petriv1.ComponentStatus{Name: name, Phase: petriv1.ComponentPending, Generation: env.Generation})
	return &env.Status.Components[len(env.Status.Components)-1]
}

// findComponentStatus is the component's status, or nil; unlike
// componentStatus it never adds one, so passes' concurrent launches may
// call it.
func findComponentStatus(env *petriv1.EphemeralEnvironment, name string) *petriv1.ComponentStatus {
	for i := range env.Status.Components {
		if env.Status.Components[i].Name == name {
			return &env.Status.Components[i]
		}
	}
	return nil
}

func findComponent(env *petriv1.EphemeralEnvironment, name string) *petriv1.Component {
	for i := range env.Spec.Components {
		if env.Spec.Components[i].Name == name {
			return &env.Spec.Components[i]
		}
	}
	return nil
}

// deployLaunch is what starting one component's deploy Job found: the
// Job started, its release busy with another Job, the Job refused by the
// API server (a failed attempt, retried with the component's backoff), or an
// error that fails the pass.
type deployLaunch struct {
	component, job string
	attempt        int32
	wait           releasebusy.Wait
	refused        error
	err            error
	at             metav1.Time
}

// launchDeploys starts the deploy Jobs of the components at once, each
// after its values Secret, and returns what each found, in their order.
// It only reads env; recordLaunch writes each outcome to its status.
func (g deployGraph) launchDeploys(ctx context.Context, env *petriv1.EphemeralEnvironment, components []string) []deployLaunch {
	out := make([]deployLaunch, len(components))
	var wg sync.WaitGroup
	for i, name := range components {
		wg.Go(func() { out[i] = g.launchDeploy(ctx, env, name) })
	}
	wg.Wait()
	return out
}

// launchDeploy writes the component's merged values into an immutable Secret
// of this generation and creates its deploy Job. Both names are
// deterministic: after a restart the existing ones are adopted. It starts
// nothing while another Helm operation on the release runs (releaseBusy).
func (g deployGraph) launchDeploy(ctx context.Context, env *petriv1.EphemeralEnvironment, name string) deployLaunch {
	attempt := int32(1)
	if cs := findComponentStatus(env, name); cs != nil {
		attempt = max(cs.Attempt, 1)
	}
	l := deployLaunch{component: name, attempt: attempt, job: jobs.DeployName(env, name, attempt)}
	if l.wait, l.err = g.jobs.releaseBusy(ctx, env, name, l.job); l.err != nil || l.wait.Busy() {
		return l
	}
	c := findComponent(env, name)
	merged, err := values.Merge(c.Values, specValues(env, name))
	if err != nil {
		l.err = fmt.Errorf("values of component %s: %w", name, err)
		return l
	}
	data, err := values.YAML(merged)
	if err != nil {
		l.err = err
		return l
	}
	gen := env.Generation
	secretName := jobs.EnvironmentKey(env, jobs.ValuesSubject, name, gen).Name()
	labels := jobLabels(env, name, contract.ActionDeploy, gen)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.options.ManagementNamespace, Name: secretName, Labels: labels},
		Immutable:  ptrTo(true),
		Data:       map[string][]byte{jobs.ValuesKey: data},
	}
	if err := controllerutil.SetControllerReference(env, secret, g.client.Scheme()); err != nil {
		l.err = err
		return l
	}
	if err := g.client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		l.err = fmt.Errorf("create values secret for %s: %w", name, err)
		return l
	}

	args := []string{"deploy",
		"--release", name,
		"--namespace", env.Status.TargetNamespace,
		"--chart-repository", c.Chart.Repository,
		"--chart-name", c.Chart.Name,
		"--chart-version", c.Chart.Version,
		"--values", jobs.ValuesFile,
		"--termination-log", jobs.TerminationLogPath,
	}
	args = append(args, jobs.ReleaseArgs(g.options, c.Chart, c.Release)...)
	l.at = g.options.MetaNow()
	if err := g.jobs.createWithin(ctx, env, l.job, labels, args, secretName, jobs.ReleaseDeadline(c.Release)); err != nil {
		if !apierrors.IsForbidden(err) && !apierrors.IsTimeout(err) && !apierrors.IsServerTimeout(err) && !apierrors.IsInternalError(err) && !apierrors.IsTooManyRequests(err) && !apierrors.IsServiceUnavailable(err) {
			l.err = err
			return l
		}
		// The API server refused the Job (a quota, an admission webhook
		// that timed out): a failed attempt like any other.
		l.refused = err
		return l
	}
	g.jobs.releaseJobs.Add(env, name, l.job)
	return l
}

// recordLaunch writes what starting a component's deploy Job found to its
// status, and says whether the Job started.
func (g deployGraph) recordLaunch(ctx context.Context, env *petriv1.EphemeralEnvironment, l deployLaunch, p *pass) (bool, error) {
	cs := componentStatus(env, l.component)
	switch {
	case l.err != nil:
		return false, l.err
	case l.wait.Busy():
		cs.Message = l.wait.Waiting()
		p.requeueAfter(jobwatch.UncachedPoll)
		return false, nil
	case l.refused != nil:
		// Retried with the component's backoff.
		now := l.at
		cs.Phase, cs.Job, cs.Generation, cs.Attempt, cs.StartedAt, cs.FinishedAt = petriv1.ComponentFailed, l.job, env.Generation, l.attempt, &now, &now
		cs.LastError = jobs.OneLine(string(contract.ReasonKubernetesRefused) + ": " + l.refused.Error())
		g.retries.schedule(env, cs, true)
		if cs.NextRetryAt != nil {
			p.requeueAfter(g.options.Until(cs.NextRetryAt.Time))
		}
		return false, nil
	}
	now := l.at
	cs.Phase, cs.Job, cs.Generation, cs.StartedAt, cs.FinishedAt, cs.Message, cs.LastError, cs.Attempt, cs.NextRetryAt =
		petriv1.ComponentDeploying, l.job, env.Generation, &now, nil, l.wait.PassedOver(), "", l.attempt, nil
	log.FromContext(ctx).Info("Started deploy job", "component", l.component, "job", l.job, "attempt", l.attempt)
	if passed := l.wait.PassedOver(); passed != "" {
		g.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonReleaseHolderLost, "Deploy", "component %s: %s", l.component, passed)
	}
	return true, nil
}

func specValues(env *petriv1.EphemeralEnvironment, name string) *apiextensionsv1.JSON {
	if v, ok := env.Spec.Values[name]; ok {
		return &v
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// pruneComponentValues deletes a component's values Secrets of generations
// before the one it is now deployed at. A failure is logged and left for
// the garbage collector (the Secrets are the environment's).
func (g deployGraph) pruneComponentValues(ctx context.Context, env *petriv1.EphemeralEnvironment, cs *petriv1.ComponentStatus) {
	match := client.MatchingLabels{petriv1.LabelEnvironmentUID: string(env.UID), contract.LabelComponent: naming.LabelValue(cs.Name)}
	if err := objects.PruneOlderValues(ctx, g.client, g.options.ManagementNamespace, match, cs.Generation); err != nil {
		log.FromContext(ctx).Info("Values secrets of older generations not deleted", "component", cs.Name, "error", err.Error())
	}
}
