package stack

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// waitEnvironment waits until sync has written the pull request's
// environment for sha.
func (sc *Scenario) waitEnvironment(ctx context.Context, sha string) (*petriv1.EphemeralEnvironment, error) {
	var found *petriv1.EphemeralEnvironment
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		var list petriv1.EphemeralEnvironmentList
		if err := sc.Stack.Client.List(ctx, &list, client.InNamespace(ManagementNamespace), client.MatchingLabels{
			"petri.dev/application": demoApplication, "petri.dev/pull-request": strconv.Itoa(sc.Number),
		}); err != nil {
			return false, nil
		}
		for i := range list.Items {
			if e := &list.Items[i]; e.Spec.Source != nil && e.Spec.Source.SHA == sha {
				found = e
				return true, nil
			}
		}
		return false, nil
	}, func() string { return "petri-sync wrote no environment for it; see " + sc.Stack.syncLog() })
	if err != nil {
		return nil, err
	}
	sc.Report.Event("EphemeralEnvironment %s/%s written by petri-sync for %s (generation %d)", ManagementNamespace, found.Name, short(sha), found.Generation)
	return found, nil
}

// waitReady follows the environment (and the shared workload) until it is
// Ready for its current generation, reporting every change.
func (sc *Scenario) waitReady(ctx context.Context, name string) (*petriv1.EphemeralEnvironment, error) {
	w := sc.w
	var env *petriv1.EphemeralEnvironment
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		cur := &petriv1.EphemeralEnvironment{}
		if err := sc.Stack.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: name}, cur); err != nil {
			return false, nil
		}
		w.observe(cur, sc.Stack.sharedWorkload(ctx))
		env = cur
		if cur.Status.ObservedGeneration != cur.Generation {
			return false, nil
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, petriv1.ConditionStalled); c != nil && c.Status == "True" {
			return false, fmt.Errorf("environment %s is stalled: %s", name, c.Message)
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, petriv1.ConditionReady)
		return c != nil && c.Status == "True" && c.ObservedGeneration == cur.Generation, nil
	}, func() string { return sc.explain(ctx, name) })
	if err != nil {
		return nil, err
	}
	sc.Report.Event("environment %s Ready (generation %d)", name, env.Generation)
	return env, nil
}

// waitSharedWorkload waits until the demo's shared workload is Ready before
// the pull request is opened. sync applies the config repository's shared
// workloads when it starts and the operator deploys their releases then,
// once for every pull request to come, as a cluster runs its shared
// workloads before pull requests bind to them. A pull request opened while
// the store was still being deployed timed part of the installation's start
// with the pull request: how much depended on how quickly the stack came up
// (nothing at a load of 7, 1.6 s of a 6.0 s open step at a load of 20).
func (sc *Scenario) waitSharedWorkload(ctx context.Context) error {
	s := sc.Stack
	step := sc.Report.Begin(fmt.Sprintf("Shared workload %s Ready (its release in %s, deployed when sync applied the config repository's shared workloads)", demoSharedWorkload, SharedNamespace))
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		sw := s.sharedWorkload(ctx)
		if sw == nil || sw.Status.ObservedGeneration != sw.Generation {
			return false, nil
		}
		c := meta.FindStatusCondition(sw.Status.Conditions, petriv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	}, func() string {
		sw := s.sharedWorkload(ctx)
		if sw == nil {
			return "petri-sync wrote no shared workload " + demoSharedWorkload + "; see " + s.syncLog()
		}
		var b strings.Builder
		fmt.Fprintf(&b, "shared workload %s: phase %q", sw.Name, sw.Status.Phase)
		for _, c := range sw.Status.Conditions {
			fmt.Fprintf(&b, "\n  condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
		b.WriteString(s.podSummary(ctx, ManagementNamespace))
		return b.String()
	})
	if err != nil {
		return step.Fail(err)
	}
	step.Done("")
	return nil
}

// explain describes why an environment is not where it should be, and
// where the logs are.
func (sc *Scenario) explain(ctx context.Context, name string) string {
	s := sc.Stack
	env := &petriv1.EphemeralEnvironment{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: name}, env); err != nil {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "environment %s phase %q, generation %d observed %d", name, env.Status.Phase, env.Generation, env.Status.ObservedGeneration)
	for _, c := range env.Status.Conditions {
		fmt.Fprintf(&b, "\n  condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, c := range env.Status.Components {
		fmt.Fprintf(&b, "\n  component %s: %s %s %s", c.Name, c.Phase, c.Message, c.LastError)
	}
	for _, bs := range env.Status.SharedWorkloads {
		fmt.Fprintf(&b, "\n  binding %s: %s %s %s", bs.Name, bs.Phase, bs.Message, bs.LastError)
	}
	if sw := s.sharedWorkload(ctx); sw != nil {
		fmt.Fprintf(&b, "\n  shared workload %s: phase %q", sw.Name, sw.Status.Phase)
		for _, c := range sw.Status.Conditions {
			fmt.Fprintf(&b, "\n    condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	b.WriteString(s.podSummary(ctx, ManagementNamespace))
	return b.String()
}

// sharedWorkload reads the demo's shared workload; nil when absent.
func (s *Stack) sharedWorkload(ctx context.Context) *petriv1.SharedWorkload {
	sw := &petriv1.SharedWorkload{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: demoSharedWorkload}, sw); err != nil {
		return nil
	}
	return sw
}

// syncLog names sync's log files.
func (s *Stack) syncLog() string {
	return s.LogDir() + "/" + SyncNamespace + "_petri-sync-*_sync.log"
}

// watcher reports each change of an environment's (and the shared
// workload's) state once.
type watcher struct {
	r    *Report
	seen map[string]string
}

func newWatcher(r *Report) *watcher { return &watcher{r: r, seen: map[string]string{}} }

func (w *watcher) set(key, value, format string, args ...any) {
	if w.seen[key] == value {
		return
	}
	w.seen[key] = value
	w.r.Event(format, args...)
}

func (w *watcher) observe(env *petriv1.EphemeralEnvironment, sw *petriv1.SharedWorkload) {
	if env.Status.Phase != "" {
		w.set("phase", string(env.Status.Phase), "environment phase: %s", env.Status.Phase)
	}
	if ns := env.Status.TargetNamespace; ns != "" {
		w.set("namespace", ns, "namespace %s bound to the environment", ns)
	}
	if sw != nil && sw.Status.Phase != "" {
		w.set("sw", string(sw.Status.Phase), "shared workload %s: %s (release in %s)", sw.Name, sw.Status.Phase, SharedNamespace)
	}
	for _, bs := range env.Status.SharedWorkloads {
		d := describe(bs.Message, bs.Job, bs.LastError)
		w.set("binding/"+bs.Name, string(bs.Phase)+d, "binding %s: %s%s", bs.Name, bs.Phase, d)
	}
	for _, c := range env.Status.Components {
		d := describe(c.Message, c.Job, c.LastError)
		w.set("component/"+c.Name, string(c.Phase)+d, "component %s: %s%s", c.Name, c.Phase, d)
	}
}

// describe renders a status entry's message, Job and last error.
func describe(message, job, lastError string) string {
	var parts []string
	if message != "" {
		parts = append(parts, message)
	}
	if job != "" {
		parts = append(parts, "Job "+job)
	}
	if lastError != "" {
		parts = append(parts, "error: "+lastError)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
