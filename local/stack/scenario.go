package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/intstr"
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
	if err := sc.showEnvironment(ctx, env); err != nil {
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
	if err := sc.showEnvironment(ctx, env); err != nil {
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

// showEnvironment prints what a person looks at: the environments, the
// namespace and what runs in it.
func (sc *Scenario) showEnvironment(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	s, r := sc.Stack, sc.Report
	for _, args := range [][]string{
		{"get", "ee", "-n", ManagementNamespace},
		{"get", "namespace", env.Status.TargetNamespace, "-L", petriv1.LabelEnvironment},
		{"get", "deploy,svc,ingress,pods", "-n", env.Status.TargetNamespace},
	} {
		out, err := s.kubectl(ctx, args...)
		if err != nil {
			return err
		}
		r.Event("$ kubectl %s", strings.Join(args, " "))
		r.Detail(out)
	}
	return nil
}

// checkRelease lists the Helm releases of the namespace (as helm list would)
// and checks that the web release is deployed, at wantRevision unless that
// is zero.
func (sc *Scenario) checkRelease(ctx context.Context, ns string, wantRevision int) (int, error) {
	rels, err := sc.Stack.releases(ctx, ns)
	if err != nil {
		return 0, err
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNAMESPACE\tREVISION\tSTATUS\tCHART\tAPP VERSION")
	rev := 0
	for _, rel := range rels {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s-%s\t%s\n", rel.Name, rel.Namespace, rel.Version, rel.Info.Status, rel.Chart.Metadata.Name, rel.Chart.Metadata.Version, rel.Chart.Metadata.AppVersion)
		if rel.Name == demoComponent {
			rev = rel.Version
			if rel.Info.Status != release.StatusDeployed {
				return 0, fmt.Errorf("release %s is %s, not deployed", rel.Name, rel.Info.Status)
			}
		}
	}
	_ = tw.Flush()
	sc.Report.Event("Helm releases in %s (helm list):", ns)
	sc.Report.Detail(b.String())
	if rev == 0 || wantRevision != 0 && rev != wantRevision {
		return rev, fmt.Errorf("release %s is at revision %d, want %d", demoComponent, rev, wantRevision)
	}
	return rev, nil
}

// checkBinding shows the shared workload and the environment's binding
// Secret (its keys; never its values), and checks the database exists on
// the shared store.
func (sc *Scenario) checkBinding(ctx context.Context, env *petriv1.EphemeralEnvironment) ([]string, string, error) {
	s, r := sc.Stack, sc.Report
	out, err := s.kubectl(ctx, "get", "sw", "-n", ManagementNamespace)
	if err != nil {
		return nil, "", err
	}
	r.Event("$ kubectl get sw -n %s", ManagementNamespace)
	r.Detail(out)
	var secret corev1.Secret
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: env.Status.TargetNamespace, Name: bindingSecret}, &secret); err != nil {
		return nil, "", fmt.Errorf("binding Secret %s/%s: %w", env.Status.TargetNamespace, bindingSecret, err)
	}
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	r.Event("binding Secret %s/%s holds %s (values not shown)", env.Status.TargetNamespace, bindingSecret, strings.Join(keys, ", "))
	for _, k := range []string{"ADMIN_PASSWORD", "STORE_URL", "DATABASE"} {
		if !slices.Contains(keys, k) {
			return keys, "", fmt.Errorf("binding Secret lacks %s", k)
		}
	}
	db := string(secret.Data["DATABASE"])
	code, body, err := sc.storeGet(ctx, "/databases/"+db)
	if err != nil {
		return keys, db, err
	}
	if code != http.StatusOK {
		return keys, db, fmt.Errorf("database %s is not on the shared store: %d %s", db, code, body)
	}
	r.Event("database %s exists on the shared store (created by the provision Job)", db)
	return keys, db, nil
}

// checkPage fetches the environment's URL until it answers with sha (a
// rollout replaces the old pod a moment after the new one is ready).
func (sc *Scenario) checkPage(ctx context.Context, url, sha, db string) (string, error) {
	var page string
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		code, body, err := httpGet(ctx, url)
		if err != nil || code != http.StatusOK {
			return false, nil
		}
		page = body
		return strings.Contains(body, "commit: "+sha+"\n"), nil
	}, func() string { return fmt.Sprintf("%s answered %q", url, page) })
	if err != nil {
		return page, err
	}
	if db != "" && !strings.Contains(page, "database: "+db+" (ready)") {
		return page, fmt.Errorf("%s does not show its database %s as ready: %q", url, db, page)
	}
	sc.Report.Event("$ curl %s", url)
	sc.Report.Detail(page)
	return page, nil
}

// checkFeedback waits for the success commit status that sync posts on the
// head commit, with the environment's URL.
func (sc *Scenario) checkFeedback(ctx context.Context, number int, sha, url string) error {
	var last string
	err := poll(ctx, sc.StepTimeout, func() (bool, error) {
		sts := sc.Stack.GitHub.Statuses(DemoRepository, sha)
		for i := len(sts) - 1; i >= 0; i-- {
			if sts[i].Context == "petri/"+demoApplication {
				last = fmt.Sprintf("%s %q -> %s", sts[i].State, sts[i].Description, sts[i].TargetURL)
				return sts[i].State == "success" && sts[i].TargetURL == url, nil
			}
		}
		return false, nil
	}, func() string { return "latest commit status: " + last })
	if err != nil {
		return fmt.Errorf("commit status on %s: %w", short(sha), err)
	}
	sc.Report.Event("GitHub: commit status petri/%s on %s: %s", demoApplication, short(sha), last)
	if c := sc.comment(number); c != "" {
		sc.Report.Event("GitHub: the pull request's comment, updated in place:")
		sc.Report.Detail(c)
	}
	return nil
}

// comment is the pull request's comment by sync (empty when there is none).
func (sc *Scenario) comment(number int) string {
	cs := sc.Stack.GitHub.Comments(DemoRepository, number)
	if len(cs) == 0 {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(cs[len(cs)-1].Body, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "<!--") {
			lines = append(lines, l)
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// leftovers lists what is left of a deleted environment.
func (sc *Scenario) leftovers(ctx context.Context, ns, uid string) ([]string, error) {
	s := sc.Stack
	var left []string
	err := s.Client.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
	switch {
	case err == nil:
		left = append(left, "namespace "+ns)
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	owned := client.MatchingLabels{petriv1.LabelEnvironmentUID: uid}
	lists := map[string]client.ObjectList{
		"Job": &batchv1.JobList{}, "Pod": &corev1.PodList{}, "Secret": &corev1.SecretList{},
		"ServiceAccount": &corev1.ServiceAccountList{}, "ConfigMap": &corev1.ConfigMapList{},
	}
	for kind, l := range lists {
		if err := s.Client.List(ctx, l, client.InNamespace(ManagementNamespace), owned); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			left = append(left, kind+" "+it.(client.Object).GetName())
		}
	}
	sort.Strings(left)
	return left, nil
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

// storeGet asks the shared store, through its Service, as a pod would.
func (sc *Scenario) storeGet(ctx context.Context, path string) (int, string, error) {
	addr, err := sc.Stack.Node.ServiceAddress(ctx, SharedNamespace, demoSharedWorkload, intstr.FromInt32(80))
	if err != nil {
		return 0, "", fmt.Errorf("shared store: %w", err)
	}
	return httpGet(ctx, "http://"+addr+path)
}

// releases lists the latest revision of every Helm release in ns from
// Helm's own storage.
func (s *Stack) releases(ctx context.Context, ns string) ([]*release.Release, error) {
	_ = ctx
	d := driver.NewSecrets(s.Cluster.Clientset.CoreV1().Secrets(ns))
	all, err := d.List(func(*release.Release) bool { return true })
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, fmt.Errorf("helm releases in %s: %w", ns, err)
	}
	latest := map[string]*release.Release{}
	for _, rel := range all {
		if cur, ok := latest[rel.Name]; !ok || rel.Version > cur.Version {
			latest[rel.Name] = rel
		}
	}
	out := make([]*release.Release, 0, len(latest))
	for _, rel := range latest {
		out = append(out, rel)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var pageClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}

func httpGet(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := pageClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), err
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
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
