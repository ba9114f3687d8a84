package stack

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// The demo's pull request on a forge other than the GitHub stand-in (Gitea,
// GitLab) is played in the same four steps: open, push, /petri redeploy
// refused and honoured, merge. What each step does on the forge, and what
// it reads back there, is the forge's; what it expects of Petri is the same
// and written once here.

// ForgeRun is what a forge's scenario saw of Petri: the pull request's
// environment and what was deployed.
type ForgeRun struct {
	// Number is the pull request's number on the forge.
	Number                 int
	Environment, Namespace string
	// SHAs are the deployed commits, opened then pushed; Revisions the web
	// release's revisions after open, push and the redeploy command.
	SHAs      []string
	Revisions []int
}

// forgeStep is one named step of a forge's scenario.
type forgeStep struct {
	name string
	run  func(context.Context) error
}

// forgeScenario is the part of a forge's scenario that waits for Petri.
type forgeScenario struct {
	sc     *Scenario
	report *Report
	// branch is the pull request's head branch.
	branch string
}

// newForgeScenario starts a forge's scenario: the step timeout (three
// minutes when zero) and a new head branch.
func newForgeScenario(st *Stack, r *Report, timeout time.Duration) (forgeScenario, time.Duration) {
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	return forgeScenario{
		sc:     &Scenario{Stack: st, Report: r, StepTimeout: timeout, w: newWatcher(r)},
		report: r,
		branch: "feature/greeting-" + randomHex(3),
	}, timeout
}

// play runs the steps in order; the error is the first that did not reach
// its expected state.
func (f forgeScenario) play(ctx context.Context, steps []forgeStep) error {
	for _, st := range steps {
		f.report.Section("%s", st.name)
		start := time.Now()
		if err := st.run(ctx); err != nil {
			f.report.Event("FAILED after %.1fs: %v", time.Since(start).Seconds(), err)
			return fmt.Errorf("%s: %w", st.name, err)
		}
		f.report.Event("step done in %.1fs", time.Since(start).Seconds())
	}
	return nil
}

// deployed waits until sha, just opened or pushed on the forge, is the
// environment's commit and Ready: the first time it records the
// environment and its namespace; after that it must be the same
// environment, redeployed in place. It returns when the environment
// was first seen written for sha.
func (f forgeScenario) deployed(ctx context.Context, run *ForgeRun, sha string) (time.Time, error) {
	f.sc.Number = run.Number
	env, err := f.sc.waitEnvironment(ctx, sha)
	if err != nil {
		return time.Time{}, err
	}
	written := time.Now()
	first := run.Environment == ""
	if first {
		run.Environment = env.Name
	} else if env.Name != run.Environment {
		return written, fmt.Errorf("the push wrote environment %s, not %s", env.Name, run.Environment)
	}
	if env, err = f.sc.waitReady(ctx, env.Name); err != nil {
		return written, err
	}
	want := 0
	if first {
		run.Namespace = env.Status.TargetNamespace
	} else {
		if env.Status.TargetNamespace != run.Namespace {
			return written, fmt.Errorf("redeployed into %s, not in place in %s", env.Status.TargetNamespace, run.Namespace)
		}
		want = run.Revisions[0] + 1
	}
	rev, err := f.sc.checkRelease(ctx, run.Namespace, want)
	if err != nil {
		return written, err
	}
	run.SHAs, run.Revisions = append(run.SHAs, sha), append(run.Revisions, rev)
	if !first {
		f.report.Event("redeployed in place: namespace %s, release revision %d", run.Namespace, rev)
	}
	return written, nil
}

// redeployed waits until the honoured command (comment or note id) asked
// for a redeploy and the release reached its next revision.
func (f forgeScenario) redeployed(ctx context.Context, run *ForgeRun, id int64) error {
	want := fmt.Sprintf("comment-%d", id)
	if err := poll(ctx, f.sc.StepTimeout, func() (bool, error) {
		env := &petriv1.EphemeralEnvironment{}
		err := f.sc.Stack.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: run.Environment}, env)
		return err == nil && env.Annotations["petri.dev/redeploy"] == want, nil
	}, func() string { return "no redeploy asked for " + want }); err != nil {
		return err
	}
	next := run.Revisions[len(run.Revisions)-1] + 1
	var rev int
	if err := poll(ctx, f.sc.StepTimeout, func() (bool, error) {
		rels, err := f.sc.Stack.releases(ctx, run.Namespace)
		if err != nil {
			return false, nil
		}
		for _, rel := range rels {
			if rel.Name == demoComponent && rel.Version >= next && rel.Info.Status == "deployed" {
				rev = rel.Version
				return true, nil
			}
		}
		return false, nil
	}, func() string { return fmt.Sprintf("release %s not at revision %d", demoComponent, next) }); err != nil {
		return err
	}
	run.Revisions = append(run.Revisions, rev)
	f.report.Event("redeployed on the command: release revision %d", rev)
	return nil
}

// gone waits until the merged pull request's environment and its
// namespace are deleted.
func (f forgeScenario) gone(ctx context.Context, run *ForgeRun) error {
	c := f.sc.Stack.Client
	if err := poll(ctx, f.sc.StepTimeout, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: run.Environment}, &petriv1.EphemeralEnvironment{})
		return apierrors.IsNotFound(err), nil
	}, func() string { return f.sc.explain(ctx, run.Environment) }); err != nil {
		return err
	}
	f.report.Event("EphemeralEnvironment %s deleted", run.Environment)
	if err := poll(ctx, f.sc.StepTimeout, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: run.Namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	}, nil); err != nil {
		return fmt.Errorf("namespace %s not deleted: %w", run.Namespace, err)
	}
	f.report.Event("namespace %s is gone", run.Namespace)
	return nil
}
