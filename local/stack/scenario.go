package stack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Names from examples/app/config-repo.
const (
	demoApplication    = "hello"
	demoComponent      = "web"
	demoSharedWorkload = "store"
	// bindingSecret is the Secret the operator writes into the environment's
	// namespace for the demo's shared workload.
	bindingSecret = "petri-binding-" + demoSharedWorkload
)

// Scenario plays one pull request's life: open it, push a commit, put its
// environment to sleep and wake it, close it, and checks after each step
// that Petri reached the expected state.
type Scenario struct {
	Stack  *Stack
	Report *Report
	// Number is the pull request's number; 1 when zero.
	Number int
	// Title is the pull request's title.
	Title string
	// StepTimeout bounds each step; three minutes when zero.
	StepTimeout time.Duration

	w *watcher
}

// Result is what the scenario observed.
type Result struct {
	// Steps lists each step with its duration, in order.
	Steps []StepResult
	// Environment and Namespace name the environment and its workload
	// namespace.
	Environment, Namespace string
	// URL is the environment's URL.
	URL string
	// SHAs are the deployed commits: opened, then pushed.
	SHAs []string
	// Revisions are the web release's revisions after each deploy.
	Revisions []int
	// Pages are what the URL answered after each deploy.
	Pages []string
	// Database is the environment's database on the shared store.
	Database string
	// BindingKeys are the keys of the binding Secret.
	BindingKeys []string
	// Sleep is what the sleep and wake steps measured.
	Sleep SleepResult
	// Real is what the real node showed (empty on the process node).
	Real RealResult
	// Placed are the placement step's environments (none without two
	// workload clusters).
	Placed []PlacedResult
}

// PlacedResult is one environment of the placement step: the workload
// cluster it was Ready in, its namespace there and the shared store it was
// bound to there (the store's copy for that cluster).
type PlacedResult struct {
	Environment, Cluster, Namespace, Store string
}

// StepResult is one step's outcome.
type StepResult struct {
	Name     string
	Duration time.Duration
	Err      error
}

// Run plays the scenario; the error is the first step that did not reach
// its expected state.
func (sc *Scenario) Run(ctx context.Context) (*Result, error) {
	if sc.Number == 0 {
		sc.Number = 1
	}
	if sc.Title == "" {
		sc.Title = "Add a greeting"
	}
	if sc.StepTimeout == 0 {
		sc.StepTimeout = 3 * time.Minute
	}
	res := &Result{}
	sc.w = newWatcher(sc.Report)
	if err := sc.waitSharedWorkload(ctx); err != nil {
		return res, err
	}
	steps := []struct {
		name string
		run  func(context.Context, *Result) error
	}{
		{fmt.Sprintf("1. Open pull request #%d", sc.Number), sc.open},
		{"2. Push a new commit", sc.push},
		{"3. Put the environment to sleep", sc.sleep},
		{"4. Wake it", sc.wake},
		{"5. Close the pull request", sc.close},
	}
	if sc.Stack.spreads() {
		steps = append(steps, struct {
			name string
			run  func(context.Context, *Result) error
		}{"6. Two pull requests, two workload clusters", sc.placed})
	}
	for _, st := range steps {
		sc.Report.Section("%s", st.name)
		start := time.Now()
		err := st.run(ctx, res)
		res.Steps = append(res.Steps, StepResult{Name: st.name, Duration: time.Since(start), Err: err})
		if err != nil {
			sc.Report.Event("FAILED after %.1fs: %v", time.Since(start).Seconds(), err)
			return res, fmt.Errorf("%s: %w", st.name, err)
		}
		sc.Report.Event("step done in %.1fs", time.Since(start).Seconds())
	}
	return res, nil
}

func (sc *Scenario) open(ctx context.Context, res *Result) error {
	s, r := sc.Stack, sc.Report
	pr, err := s.OpenPullRequest(ctx, sc.Number, sc.Title)
	if err != nil {
		return err
	}
	res.SHAs = append(res.SHAs, pr.HeadSHA)
	r.Event("GitHub: pull request #%d %q opened on %s (%s -> %s, head %s, label %q)", pr.Number, pr.Title, DemoRepository, pr.HeadRef, pr.BaseRef, short(pr.HeadSHA), DemoLabel)
	r.Event("webhook pull_request/opened delivered to %s: 202 Accepted", s.WebhookURL)

	env, err := sc.waitEnvironment(ctx, pr.HeadSHA)
	if err != nil {
		return err
	}
	res.Environment, res.URL = env.Name, env.Annotations["petri.dev/url"]
	env, err = sc.waitReady(ctx, env.Name)
	if err != nil {
		return err
	}
	res.Namespace = env.Status.TargetNamespace
	if err := sc.showEnvironment(ctx, env, true); err != nil {
		return err
	}
	rev, err := sc.checkRelease(ctx, res.Namespace, 0)
	if err != nil {
		return err
	}
	res.Revisions = append(res.Revisions, rev)
	keys, db, err := sc.checkBinding(ctx, env)
	if err != nil {
		return err
	}
	res.BindingKeys, res.Database = keys, db
	page, err := sc.checkPage(ctx, res.URL, pr.HeadSHA, db)
	if err != nil {
		return err
	}
	res.Pages = append(res.Pages, page)
	if err := sc.checkRealNode(ctx, res, pr.HeadSHA); err != nil {
		return err
	}
	return sc.checkFeedback(ctx, pr.Number, pr.HeadSHA, res.URL)
}

func (sc *Scenario) push(ctx context.Context, res *Result) error {
	s, r := sc.Stack, sc.Report
	before := &petriv1.EphemeralEnvironment{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: res.Environment}, before); err != nil {
		return err
	}
	pr, err := s.PushCommit(ctx, sc.Number)
	if err != nil {
		return err
	}
	res.SHAs = append(res.SHAs, pr.HeadSHA)
	r.Event("GitHub: commit %s pushed to %s (was %s)", short(pr.HeadSHA), pr.HeadRef, short(res.SHAs[0]))
	r.Event("webhook pull_request/synchronize delivered: 202 Accepted")

	env, err := sc.waitEnvironment(ctx, pr.HeadSHA)
	if err != nil {
		return err
	}
	r.Event("petri-sync updated %s: generation %d -> %d (values of %s)", env.Name, before.Generation, env.Generation, short(pr.HeadSHA))
	if env.UID != before.UID {
		return fmt.Errorf("the environment was replaced (uid %s -> %s), not updated in place", before.UID, env.UID)
	}
	env, err = sc.waitReady(ctx, env.Name)
	if err != nil {
		return err
	}
	if env.Status.TargetNamespace != res.Namespace {
		return fmt.Errorf("the environment moved from namespace %s to %s", res.Namespace, env.Status.TargetNamespace)
	}
	r.Event("same namespace %s, re-deployed in place", env.Status.TargetNamespace)
	if err := sc.showEnvironment(ctx, env, false); err != nil {
		return err
	}
	rev, err := sc.checkRelease(ctx, res.Namespace, res.Revisions[0]+1)
	if err != nil {
		return err
	}
	res.Revisions = append(res.Revisions, rev)
	page, err := sc.checkPage(ctx, res.URL, pr.HeadSHA, res.Database)
	if err != nil {
		return err
	}
	res.Pages = append(res.Pages, page)
	if err := sc.checkRealNode(ctx, res, pr.HeadSHA); err != nil {
		return err
	}
	return sc.checkFeedback(ctx, pr.Number, pr.HeadSHA, res.URL)
}

func (sc *Scenario) close(ctx context.Context, res *Result) error {
	s, r := sc.Stack, sc.Report
	env := &petriv1.EphemeralEnvironment{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: res.Environment}, env); err != nil {
		return err
	}
	pr, err := s.ClosePullRequest(ctx, sc.Number)
	if err != nil {
		return err
	}
	r.Event("GitHub: pull request #%d closed", pr.Number)
	r.Event("webhook pull_request/closed delivered: 202 Accepted")

	w := sc.w
	err = poll(ctx, sc.StepTimeout, func() (bool, error) {
		cur := &petriv1.EphemeralEnvironment{}
		err := s.Client.Get(ctx, client.ObjectKeyFromObject(env), cur)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, nil
		}
		w.observe(cur, s.sharedWorkload(ctx))
		return false, nil
	}, func() string { return sc.explain(ctx, env.Name) })
	if err != nil {
		return fmt.Errorf("environment %s not deleted: %w", env.Name, err)
	}
	r.Event("EphemeralEnvironment %s deleted (finalizer released)", env.Name)

	// Nothing of it is left: its namespace, the objects the operator made
	// for it in the management namespace, its database, its URL.
	uid := string(env.UID)
	err = poll(ctx, sc.StepTimeout, func() (bool, error) {
		left, err := sc.leftovers(ctx, res.Namespace, uid)
		return err == nil && len(left) == 0, err
	}, func() string {
		left, err := sc.leftovers(ctx, res.Namespace, uid)
		if err != nil {
			return err.Error()
		}
		return "still there: " + strings.Join(left, ", ")
	})
	if err != nil {
		return err
	}
	r.Event("namespace %s is gone; no Job, pod, Secret or ServiceAccount of the environment is left in %s", res.Namespace, ManagementNamespace)
	if err := sc.checkRealNodeGone(ctx, res.Namespace); err != nil {
		return err
	}
	if res.Database != "" {
		if err := poll(ctx, sc.StepTimeout, func() (bool, error) {
			code, _, err := sc.storeGet(ctx, "/databases/"+res.Database)
			return err == nil && code == http.StatusNotFound, nil
		}, nil); err != nil {
			return fmt.Errorf("database %s still on the shared store: %w", res.Database, err)
		}
		r.Event("database %s dropped from the shared store by the deprovision Job", res.Database)
	}
	code, body, err := httpGet(ctx, res.URL)
	if err != nil {
		return err
	}
	if code != http.StatusNotFound {
		return fmt.Errorf("%s still answers %d: %s", res.URL, code, body)
	}
	r.Event("%s answers 404: no Ingress rule is left", res.URL)
	out, err := s.kubectl(ctx, "get", "ee,sw", "-n", ManagementNamespace)
	if err != nil {
		return err
	}
	r.Event("$ kubectl get ee,sw -n %s", ManagementNamespace)
	r.Detail(out)
	if err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		return strings.Contains(sc.comment(pr.Number), "deleted"), nil
	}, func() string { return "the pull request's comment does not say so: " + sc.comment(pr.Number) }); err != nil {
		return err
	}
	r.Event("the pull request's comment says the environment was deleted")
	return nil
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
