package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
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

// showEnvironment prints what a person looks at: the environments, the
// namespace and what runs in it, and with sharedWorkloads the shared
// workloads too.
func (sc *Scenario) showEnvironment(ctx context.Context, env *petriv1.EphemeralEnvironment, sharedWorkloads bool) error {
	cmds := [][]string{
		{"get", "ee", "-n", ManagementNamespace},
		{"get", "namespace", env.Status.TargetNamespace, "-L", petriv1.LabelEnvironment},
		{"get", "deploy,svc,ingress,pods", "-n", env.Status.TargetNamespace},
	}
	if sharedWorkloads {
		cmds = append(cmds, []string{"get", "sw", "-n", ManagementNamespace})
	}
	outs, err := sc.Stack.kubectlAll(ctx, cmds)
	if err != nil {
		return err
	}
	for i, args := range cmds {
		sc.Report.Event("$ kubectl %s", strings.Join(args, " "))
		sc.Report.Detail(outs[i])
	}
	return nil
}

// kubectlAll runs the kubectl commands side by side and returns their
// outputs in order: each is a process that spends most of its time
// starting, so one after the other they kept the step waiting on kubectl.
// The error joins those of the commands that failed.
func (s *Stack) kubectlAll(ctx context.Context, cmds [][]string) ([]string, error) {
	outs := make([]string, len(cmds))
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i, args := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = s.kubectl(ctx, args...)
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
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

// checkBinding shows the environment's binding Secret (its keys; never its
// values), and checks the database exists on the shared store.
func (sc *Scenario) checkBinding(ctx context.Context, env *petriv1.EphemeralEnvironment) ([]string, string, error) {
	s, r := sc.Stack, sc.Report
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
	for _, k := range []string{"STORE_URL", "DATABASE"} {
		if !slices.Contains(keys, k) {
			return keys, "", fmt.Errorf("binding Secret lacks %s", k)
		}
	}
	if slices.Contains(keys, "ADMIN_PASSWORD") {
		return keys, "", errors.New("binding Secret holds the store's instance key ADMIN_PASSWORD")
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

// storeGet asks the shared store, through its Service, as a pod would.
func (sc *Scenario) storeGet(ctx context.Context, path string) (int, string, error) {
	addr, err := sc.Stack.ServiceAddress(ctx, SharedNamespace, demoSharedWorkload, intstr.FromInt32(80))
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

var pageClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}

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
