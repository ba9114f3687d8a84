package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/ui"
)

// wall is the real clock, read by name where a test needs the time.
var wall = clock.RealClock{}

const (
	mgmtNS        = "petri-system"
	sharedNS      = "petri-shared"
	syncNS        = "petri-sync"
	deployerImage = "petri.dev/deployer"
	helperImage   = "petri.dev/testhelper"
	imageCharts   = "/charts"
)

var (
	cluster *controlplane.Cluster
	// server serves the page as petri-sync serves it: its identity and
	// RBAC (config/sync), its cache, its HTTP server settings.
	server *httptest.Server
	root   string
	// paths lists the requests the server answered, in order.
	pathsMu sync.Mutex
	paths   []string
)

// requests is how many requests the server has answered.
func requests() int {
	pathsMu.Lock()
	defer pathsMu.Unlock()
	return len(paths)
}

// requestedSince returns the paths requested after the first n requests.
func requestedSince(n int) []string {
	pathsMu.Lock()
	defer pathsMu.Unlock()
	if n >= len(paths) {
		return nil
	}
	return append([]string(nil), paths[n:]...)
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	scratch, err := os.MkdirTemp("", "sync-ui-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)
	if root, err = controlplane.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bins, err := controlplane.Build(filepath.Join(scratch, "bin"), "./cmd/petri-deployer", "./tests/cmd/petri-testhelper")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster, err = controlplane.Start(controlplane.Options{
		Images:     map[string]string{deployerImage: bins["petri-deployer"], helperImage: bins["petri-testhelper"]},
		ImageFiles: map[string]map[string]string{deployerImage: {imageCharts: filepath.Join(root, "examples", "charts")}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer server.Close()
	return m.Run()
}

func zapLevel() zapcore.Level {
	if os.Getenv("PETRI_TEST_VERBOSE") != "" {
		return -1
	}
	return 1
}

// serve installs Petri's RBAC (the operator's, for the tests that run it,
// and sync's from config/sync) and serves the page as sync's identity.
func serve(ctx context.Context) error {
	for _, ns := range []string{mgmtNS, sharedNS, syncNS} {
		if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	rbac, syncDir := filepath.Join(root, "config", "rbac"), filepath.Join(root, "config", "sync")
	if err := cluster.Apply(ctx,
		filepath.Join(rbac, "service_account.yaml"), filepath.Join(rbac, "generated", "role.yaml"),
		filepath.Join(rbac, "cluster_role_binding.yaml"), filepath.Join(rbac, "role_binding.yaml"),
		filepath.Join(syncDir, "service_account.yaml"), filepath.Join(syncDir, "role.yaml"),
		filepath.Join(syncDir, "role_binding.yaml"), filepath.Join(syncDir, "logs_role.yaml"),
	); err != nil {
		return err
	}
	cfg, err := cluster.ServiceAccountConfig(ctx, syncNS, "petri-sync")
	if err != nil {
		return err
	}
	// sync's cache (sync/syncer): the management namespace, sync's label.
	c, err := cache.New(cfg, cache.Options{
		Scheme:               controlplane.Scheme(),
		DefaultNamespaces:    map[string]cache.Config{mgmtNS: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: render.ManagedBy}),
	})
	if err != nil {
		return err
	}
	pods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	page, err := ui.New(ui.Options{Cache: c, Namespace: mgmtNS, Pods: pods.CoreV1(), Log: ctrl.Log.WithName("ui")})
	if err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	go func() {
		if err := page.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "ui stopped:", err)
		}
	}()
	mux := http.NewServeMux()
	page.Register(mux)
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pathsMu.Lock()
		paths = append(paths, r.URL.Path)
		pathsMu.Unlock()
		mux.ServeHTTP(w, r)
	})
	server = httptest.NewUnstartedServer(counted)
	server.Config = api.Server("", counted)
	server.Start()
	return nil
}

var inputs sync.Once

func registerInputs(t *testing.T) {
	inputs.Do(func() {
		require.NoError(t, controlplane.RegisterInputs("cmd/petri-deployer", "tests/cmd", "local/node", "examples/charts", "config/sync", "config/rbac"))
	})
}

// syncEnvironment is an environment as sync writes it for a pull request.
func syncEnvironment(name string, number int, components ...petriv1.Component) *petriv1.EphemeralEnvironment {
	return &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name,
			Labels: map[string]string{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: "shop",
				render.LabelPullRequest: fmt.Sprint(number)},
			Annotations: map[string]string{render.AnnotationURL: fmt.Sprintf("http://pr-%d.shop.example.com", number),
				render.AnnotationRepository: "acme/shop"},
		},
		Spec: petriv1.EphemeralEnvironmentSpec{
			Components: components,
			Source: &petriv1.Source{Repository: "acme/shop", Branch: fmt.Sprintf("feature-%d", number), SHA: "9c2f1e7ab3d4",
				PullRequest: number, URL: fmt.Sprintf("https://github.com/acme/shop/pull/%d", number)},
			TTL: &metav1.Duration{Duration: 72 * time.Hour},
		},
	}
}

// greeter is a component of the example chart. No node here runs its
// pods, so it does not wait for them.
func greeter(name string, dependsOn ...string) petriv1.Component {
	return petriv1.Component{Name: name, Chart: petriv1.ChartReference{Repository: imageCharts, Name: "greeter", Version: "0.1.0"}, DependsOn: dependsOn,
		Release: petriv1.ReleaseOptions{Wait: new(false)}}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	registerInputs(t)
	require.NoError(t, cluster.Client.Create(context.Background(), obj))
}

// setStatus writes an environment's status as the operator would.
func setStatus(t *testing.T, name string, f func(*petriv1.EphemeralEnvironmentStatus)) {
	t.Helper()
	e := &petriv1.EphemeralEnvironment{}
	require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, e))
	before := e.DeepCopy()
	f(&e.Status)
	require.NoError(t, cluster.Client.Status().Patch(context.Background(), e, client.MergeFrom(before)))
}

func get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(server.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// The page shows every environment sync wrote with its pull request, URL,
// namespace, age, expiry, components and bindings, and the shared
// workloads; nothing sync did not write, and nothing a shared workload's own
// containers printed.
func TestPageShowsEnvironmentsAndNoSecrets(t *testing.T) {
	ctx := context.Background()
	api := greeter("api", "web")
	api.Uses = []string{"postgres"}
	e := syncEnvironment("shop-pr-7-aaaa", 7, greeter("web"), api)
	e.Spec.SharedWorkloads = []string{"postgres"}
	create(t, e)
	const leaked = "FATAL: password authentication failed for user admin password=s3cr3t-from-provision"
	setStatus(t, e.Name, func(s *petriv1.EphemeralEnvironmentStatus) {
		s.Phase, s.TargetNamespace = petriv1.EnvironmentFailed, "shop-pr-7-aaaa-1f"
		s.ExpiresAt = &metav1.Time{Time: wall.Now().Add(50 * time.Hour)}
		s.Components = []petriv1.ComponentStatus{
			{Name: "web", Phase: petriv1.ComponentFailed, Job: "shop-pr-7-aaaa-web-deploy-g1-12345678", LastError: "RenderFailed: values don't meet the specifications of the schema"},
			{Name: "api", Phase: petriv1.ComponentPending, Message: "waiting for shared workload postgres: " + leaked},
		}
		s.SharedWorkloads = []petriv1.BindingStatus{{Name: "postgres", Phase: petriv1.ComponentFailed, Job: "shop-pr-7-aaaa-postgres-provision-g1-abcdef12", LastError: leaked}}
		s.Conditions = []metav1.Condition{{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed,
			Message: "failed: web; binding postgres: " + leaked, LastTransitionTime: metav1.NewTime(wall.Now())}}
	})
	foreign := syncEnvironment("hand-made", 8, greeter("web"))
	foreign.Labels = nil
	create(t, foreign)
	sw := &petriv1.SharedWorkload{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "postgres-page",
			Labels: map[string]string{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: render.SharedWorkloadOwner}},
		Spec: petriv1.SharedWorkloadSpec{Chart: petriv1.ChartReference{Repository: imageCharts, Name: "greeter", Version: "0.1.0"}, Release: petriv1.ReleaseOptions{Wait: new(false)}},
	}
	create(t, sw)
	t.Cleanup(func() {
		for _, o := range []client.Object{e, foreign, sw} {
			_ = cluster.Client.Delete(ctx, o)
		}
	})

	var body string
	require.Eventually(t, func() bool {
		_, body = get(t, "/")
		return strings.Contains(body, `id="env-shop-pr-7-aaaa" data-phase="Failed"`) && strings.Contains(body, `id="sw-postgres-page"`)
	}, 10*time.Second, 50*time.Millisecond, "the page shows the environment from the cache")
	resp, body := get(t, "/")
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
	assert.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	for _, want := range []string{
		`<a href="https://github.com/acme/shop/pull/7" rel="noreferrer">acme/shop #7</a>`,
		`<span class="branch">feature-7</span>`, `<code>9c2f1e7</code>`,
		`<a class="url" href="http://pr-7.shop.example.com" rel="noreferrer">http://pr-7.shop.example.com</a>`,
		`<code>shop-pr-7-aaaa-1f</code>`,
		`<dt>Cluster</dt><dd data-cluster>management cluster</dd>`,
		`data-age>`, `data-until>in 2d`,
		`<span class="name">web</span><span class="chart">greeter 0.1.0</span><span class="phase phase-failed">Failed</span>`,
		`job <code>shop-pr-7-aaaa-web-deploy-g1-12345678</code>`,
		`RenderFailed: values don&#39;t meet the specifications of the schema`,
		`data-src="ui/log/shop-pr-7-aaaa/shop-pr-7-aaaa-web-deploy-g1-12345678" data-phase="Failed" open`,
		`<span class="name">postgres</span><span class="chart">shared workload</span>`,
		`container output withheld; see the logs of job shop-pr-7-aaaa-postgres-provision-g1-abcdef12`,
		`<span class="name">postgres-page</span><span class="chart">greeter 0.1.0</span>`,
	} {
		assert.Contains(t, body, want)
	}
	assert.NotContains(t, body, "s3cr3t", "a provision container's output never reaches the page")
	assert.NotContains(t, body, "hand-made", "only the environments sync wrote")

	_, js := get(t, "/ui/static/app.js")
	assert.Contains(t, js, `new EventSource("ui/events")`)
	resp, _ = get(t, "/ui/nothing")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// helperJob runs the test helper as a Job labelled like Petri's Jobs of an
// environment.
// TestPageShowsSyncsExpiry: an environment whose expiry sync keeps (an
// application's ttl) shows that expiry, as sync's comment does, not
// "never"; one kept by /petri keep says so. A Gitea pull request's
// environment shows its own state's, not that of GitHub's pull request of
// the same path and number.
func TestPageShowsSyncsExpiry(t *testing.T) {
	ctx := context.Background()
	expiring := syncEnvironment("shop-pr-21-aaaa", 21, greeter("web"))
	kept := syncEnvironment("shop-pr-22-aaaa", 22, greeter("web"))
	onGitea := syncEnvironment("shop-pr-22-bbbb", 22, greeter("web"))
	onGitea.Annotations[render.AnnotationForge] = "gitea"
	at := metav1.NewTime(wall.Now().Add(50 * time.Hour))
	giteaAt := metav1.NewTime(wall.Now().Add(80 * time.Hour))
	states := []*petriv1.PullRequestState{
		{Spec: petriv1.PullRequestStateSpec{Forge: "github", Repository: "acme/shop", Number: 21,
			Applications: []petriv1.ApplicationLifecycle{{Name: "shop", ExpiresAt: &at}}}},
		{Spec: petriv1.PullRequestStateSpec{Forge: "github", Repository: "acme/shop", Number: 22, Kept: true,
			Applications: []petriv1.ApplicationLifecycle{{Name: "shop", ExpiresAt: &at}}}},
		{Spec: petriv1.PullRequestStateSpec{Forge: "gitea", Repository: "acme/shop", Number: 22,
			Applications: []petriv1.ApplicationLifecycle{{Name: "shop", ExpiresAt: &giteaAt}}}},
	}
	for _, st := range states {
		st.Namespace, st.Name = mgmtNS, prstate.Name(prstate.Key{Forge: st.Spec.Forge, Repository: "acme/shop", Number: int(st.Spec.Number)})
		st.Labels = map[string]string{petriv1.LabelManagedBy: render.ManagedBy}
	}
	objects := []client.Object{expiring, kept, onGitea, states[0], states[1], states[2]}
	for _, o := range objects {
		create(t, o)
	}
	t.Cleanup(func() {
		for _, o := range objects {
			_ = cluster.Client.Delete(ctx, o)
		}
	})
	section := func(body, id string) string {
		i := strings.Index(body, `id="env-`+id+`"`)
		if i < 0 {
			return ""
		}
		rest := body[i:]
		if j := strings.Index(rest[1:], `id="env-`); j >= 0 {
			rest = rest[:j+1]
		}
		return rest
	}
	require.Eventually(t, func() bool {
		_, body := get(t, "/")
		return strings.Contains(section(body, expiring.Name), "data-until>in 2d") &&
			strings.Contains(section(body, kept.Name), "never: kept by <code>/petri keep</code>") &&
			strings.Contains(section(body, onGitea.Name), "data-until>in 3d")
	}, 10*time.Second, 50*time.Millisecond, "the page shows sync's expiry and keep, each of its own forge's pull request")
}

func helperJob(t *testing.T, env, name, action string) {
	t.Helper()
	l := map[string]string{petriv1.LabelEnvironment: env, "petri.dev/action": action}
	create(t, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name, Labels: l},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
					Name: "main", Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"succeed"},
				}}},
			},
		},
	})
	require.Eventually(t, func() bool {
		var j batchv1.Job
		return cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, &j) == nil && j.Status.Succeeded == 1
	}, time.Minute, 50*time.Millisecond, "job %s runs", name)
}

// A log tail is read through the API server with sync's identity, for a
// deployer Job an environment names; never for a provision step, for a Job
// no environment of sync's names, or for another environment's Job.
func TestLogTails(t *testing.T) {
	e := syncEnvironment("shop-pr-11-cccc", 11, greeter("web"))
	e.Spec.SharedWorkloads = []string{"postgres"}
	create(t, e)
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), e) })
	helperJob(t, e.Name, "shop-pr-11-web-deploy", "deploy")
	helperJob(t, e.Name, "shop-pr-11-postgres-provision", "provision")
	helperJob(t, "other-env", "other-env-web-deploy", "deploy")
	setStatus(t, e.Name, func(s *petriv1.EphemeralEnvironmentStatus) {
		s.Phase = petriv1.EnvironmentReady
		s.Components = []petriv1.ComponentStatus{{Name: "web", Phase: petriv1.ComponentDeployed, Job: "shop-pr-11-web-deploy"}}
		s.SharedWorkloads = []petriv1.BindingStatus{{Name: "postgres", Phase: petriv1.ComponentDeployed, Job: "shop-pr-11-postgres-provision"}}
	})
	var resp *http.Response
	var body string
	require.Eventually(t, func() bool {
		resp, body = get(t, "/ui/log/shop-pr-11-cccc/shop-pr-11-web-deploy")
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "the cache has the environment's status")
	assert.True(t, strings.HasPrefix(body, "succeeded as pod shop-pr-11-web-deploy-"), body)
	assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))

	resp, body = get(t, "/ui/log/shop-pr-11-cccc/shop-pr-11-postgres-provision")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.NotContains(t, body, "succeeded as pod")
	resp, _ = get(t, "/ui/log/shop-pr-11-cccc/other-env-web-deploy")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "a Job the environment does not name")
	resp, _ = get(t, "/ui/log/other-env/other-env-web-deploy")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "an environment sync did not write")
}
