package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/cmd/kubectl-petri/internal/plugin"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
)

const (
	mgmtNS        = "petri-system"
	sharedNS      = "petri-shared"
	deployerImage = "petri.dev/deployer"
	helperImage   = "petri.dev/testhelper"
	imageCharts   = "/charts"
)

var cluster *controlplane.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the local control plane with a local node that plays the
// deployer, and the operator in-process as production wires it
// (controllers.NewManager, its ServiceAccount, config/rbac).
func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	scratch, err := os.MkdirTemp("", "kubectl-petri-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)
	bins, err := controlplane.Build(filepath.Join(scratch, "bin"), "./cmd/petri-deployer", "./tests/cmd/petri-testhelper")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	root, err := controlplane.RepoRoot()
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
	stop, err := startOperator(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	return m.Run()
}

func zapLevel() zapcore.Level {
	if os.Getenv("PETRI_TEST_VERBOSE") != "" {
		return -1
	}
	return 1
}

func startOperator(root string) (func(), error) {
	ctx := context.Background()
	for _, ns := range []string{mgmtNS, sharedNS} {
		if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	rbac := filepath.Join(root, "config", "rbac")
	if err := cluster.Apply(ctx, filepath.Join(rbac, "service_account.yaml"), filepath.Join(rbac, "generated", "role.yaml"),
		filepath.Join(rbac, "cluster_role_binding.yaml"), filepath.Join(rbac, "role_binding.yaml")); err != nil {
		return nil, err
	}
	cfg, err := cluster.ServiceAccountConfig(ctx, mgmtNS, "petri-operator")
	if err != nil {
		return nil, err
	}
	o := controllers.DefaultOptions()
	o.DeployerImage = deployerImage + ":dev"
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.JobBackoffLimit = 0
	o.TeardownBackoff = 200 * time.Millisecond
	mgr, err := controllers.NewManager(cfg, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "operator stopped with error:", err)
		}
	}, nil
}

var inputs sync.Once

// kubectlPetri runs the plugin's command as kubectl would run the binary,
// with a kubeconfig file.
func kubectlPetri(t *testing.T, kubeconfig string, args ...string) (string, string, error) {
	t.Helper()
	inputs.Do(func() {
		require.NoError(t, controlplane.RegisterInputs("cmd/petri-deployer", "tests/cmd", "local/node", "examples/charts"))
	})
	var out, errOut bytes.Buffer
	cmd := plugin.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// greeter is a component of the example chart. No node here runs its
// pods, so it does not wait for them.
func greeter(name string, dependsOn ...string) petriv1.Component {
	return petriv1.Component{Name: name, Chart: petriv1.ChartReference{Repository: imageCharts, Name: "greeter", Version: "0.1.0"}, DependsOn: dependsOn,
		Release: petriv1.ReleaseOptions{Wait: new(false)}}
}

// prEnvironment is an environment as sync writes it for pull request 42.
func prEnvironment(name string, components ...petriv1.Component) *petriv1.EphemeralEnvironment {
	return &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name,
			Labels:      map[string]string{render.LabelApplication: "shop", render.LabelPullRequest: "42"},
			Annotations: map[string]string{render.AnnotationURL: "http://pr-42.shop.localhost:8480", render.AnnotationRepository: "acme/shop"},
		},
		Spec: petriv1.EphemeralEnvironmentSpec{
			Components: components,
			Source: &petriv1.Source{Repository: "acme/shop", Branch: "add-cart", SHA: "1a2b3c4d5e6f", PullRequest: 42,
				URL: "https://github.com/acme/shop/pull/42"},
			TTL: &metav1.Duration{Duration: 48 * time.Hour},
		},
	}
}

func ready(e *petriv1.EphemeralEnvironment) bool {
	return e.Status.ObservedGeneration == e.Generation && apimeta.IsStatusConditionTrue(e.Status.Conditions, petriv1.ConditionReady)
}

func waitFor(t *testing.T, name, what string, cond func(*petriv1.EphemeralEnvironment) bool) *petriv1.EphemeralEnvironment {
	t.Helper()
	e := &petriv1.EphemeralEnvironment{}
	require.Eventually(t, func() bool {
		return cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, e) == nil && cond(e)
	}, 2*time.Minute, 50*time.Millisecond, "%s: %s; status %+v", name, what, e.Status)
	return e
}

func create(t *testing.T, e *petriv1.EphemeralEnvironment) {
	t.Helper()
	require.NoError(t, cluster.Client.Create(context.Background(), e))
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cluster.Client.Delete(ctx, e)
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKeyFromObject(e), &petriv1.EphemeralEnvironment{}))
		}, 2*time.Minute, 50*time.Millisecond, "environment %s torn down", e.Name)
	})
}

func sharedWorkload(name string) *petriv1.SharedWorkload {
	step := &petriv1.ContainerTemplate{Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"succeed"}}
	return &petriv1.SharedWorkload{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name},
		Spec: petriv1.SharedWorkloadSpec{
			Chart:          petriv1.ChartReference{Repository: imageCharts, Name: "greeter", Version: "0.1.0"},
			Release:        petriv1.ReleaseOptions{Wait: new(false)},
			InstanceSecret: &petriv1.InstanceSecretSpec{Keys: []string{"PASSWORD"}},
			Binding:        map[string]string{"DATABASE": "db_{{ .Hash }}"},
			Provision:      step, Deprovision: step,
		},
	}
}

// get runs kubectl petri get NAME -o json, with any more flags, and
// decodes it.
func getJSON(t *testing.T, kubeconfig, name string, flags ...string) plugin.Environment {
	t.Helper()
	out, errOut, err := kubectlPetri(t, kubeconfig, append([]string{"get", name, "-o", "json"}, flags...)...)
	require.NoError(t, err, errOut)
	var v plugin.Environment
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	return v
}

func component(v plugin.Environment, name string) plugin.Component {
	for _, c := range v.Components {
		if c.Name == name {
			return c
		}
	}
	return plugin.Component{}
}

// The tree shows what a reviewer and an operator need: phase, pull request,
// URL, namespace, expiry, every component with its chart, phase, Helm
// revision, Job and pod, and the shared-workload bindings; -o json and -o
// yaml carry the same.
func TestGetShowsTheEnvironmentTree(t *testing.T) {
	ctx := context.Background()
	sw := sharedWorkload("db")
	require.NoError(t, cluster.Client.Create(ctx, sw))
	t.Cleanup(func() {
		require.NoError(t, cluster.Client.Delete(ctx, sw))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(cluster.Client.Get(ctx, client.ObjectKeyFromObject(sw), &petriv1.SharedWorkload{}))
		}, 2*time.Minute, 50*time.Millisecond, "shared workload db torn down")
	})
	api := greeter("api", "web")
	api.Uses = []string{"db"}
	e := prEnvironment("shop-pr-42", greeter("web"), api)
	e.Spec.SharedWorkloads = []string{"db"}
	create(t, e)
	e = waitFor(t, "shop-pr-42", "Ready", ready)

	out, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "get", "shop-pr-42")
	require.NoError(t, err, errOut)
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	assert.Equal(t, "shop-pr-42  Ready", lines[0])
	for _, want := range []string{
		"├─ pull request  #42 acme/shop (add-cart @ 1a2b3c4) https://github.com/acme/shop/pull/42",
		"├─ url           http://pr-42.shop.localhost:8480",
		"├─ namespace     " + e.Status.TargetNamespace,
		"├─ cluster       management cluster",
		"├─ components",
		"│  ├─ web  greeter 0.1.0  Deployed  revision 1",
		"│  └─ api  greeter 0.1.0  Deployed  revision 1",
		"└─ shared workloads",
		"   └─ db  Deployed  secret " + e.Status.SharedWorkloads[0].Secret,
	} {
		assert.Contains(t, lines, want)
	}
	assert.Regexp(t, `├─ age           \S+ \(expires in (47|48)h\)`, out)
	webJob := e.Status.Components[0].Job
	if e.Status.Components[0].Name != "web" {
		webJob = e.Status.Components[1].Job
	}
	assert.Regexp(t, `│  │  ├─ job `+webJob+`  pod `+webJob+`-\S+ Succeeded`, out)
	// These components do not wait for their pods, which run nowhere here.
	assert.Contains(t, lines, "│  │  └─ not waited for: release.wait is false", "the component's message")
	assert.Regexp(t, `      └─ job \S+  pod \S+ Succeeded`, out, "the binding's latest Job and pod")

	v := getJSON(t, cluster.Kubeconfig, "shop-pr-42")
	assert.Equal(t, "Ready", v.Phase)
	assert.Equal(t, 42, v.PullRequest)
	assert.Equal(t, "https://github.com/acme/shop/pull/42", v.PRURL)
	assert.Equal(t, "http://pr-42.shop.localhost:8480", v.URL)
	assert.Equal(t, e.Status.TargetNamespace, v.Namespace)
	assert.Equal(t, render.ClusterManagement, v.Cluster)
	assert.Equal(t, e.Status.ExpiresAt.Time.UTC(), v.ExpiresAt.UTC())
	web := component(v, "web")
	assert.Equal(t, 1, web.Revision)
	require.NotNil(t, web.Job)
	assert.Equal(t, webJob, web.Job.Name)
	assert.Equal(t, "deploy", web.Job.Action)
	assert.Equal(t, "Succeeded", web.Job.PodPhase)
	require.Len(t, v.SharedWorkloads, 1)
	assert.Equal(t, "db", v.SharedWorkloads[0].Name)
	assert.Equal(t, "Deployed", v.SharedWorkloads[0].Phase)
	assert.Empty(t, v.Warnings)

	yamlOut, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "get", "shop-pr-42", "-o", "yaml")
	require.NoError(t, err, errOut)
	var fromYAML plugin.Environment
	require.NoError(t, yaml.Unmarshal([]byte(yamlOut), &fromYAML))
	assert.Equal(t, v.Components, fromYAML.Components)

	all, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "get", "-o", "json")
	require.NoError(t, err, errOut)
	var list struct{ Items []plugin.Environment }
	require.NoError(t, json.Unmarshal([]byte(all), &list))
	assert.True(t, containsEnv(list.Items, "shop-pr-42"), "get without a name lists every environment")

	_, _, err = kubectlPetri(t, cluster.Kubeconfig, "get", "no-such-env")
	assert.ErrorContains(t, err, "environment no-such-env in namespace petri-system")
	_, _, err = kubectlPetri(t, cluster.Kubeconfig, "get", "shop-pr-42", "-o", "wide")
	assert.ErrorContains(t, err, "use json or yaml")
	empty, _, err := kubectlPetri(t, cluster.Kubeconfig, "get", "-n", "default")
	require.NoError(t, err)
	assert.Equal(t, "No environments in namespace default.\n", empty)

	// sync's expiry of the pull request's environment (its state, as the
	// pull request's comment says it) wins over the spec.ttl; /petri keep
	// shows as kept.
	at := metav1.NewTime(time.Now().Add(100 * time.Hour))
	st := &petriv1.PullRequestState{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: prstate.Name(prstate.Key{Repository: "acme/shop", Number: 42})},
		Spec: petriv1.PullRequestStateSpec{Forge: "github", Repository: "acme/shop", Number: 42,
			Applications: []petriv1.ApplicationLifecycle{{Name: "shop", ExpiresAt: &at}}},
	}
	require.NoError(t, cluster.Client.Create(context.Background(), st))
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), st) })
	out, errOut, err = kubectlPetri(t, cluster.Kubeconfig, "get", "shop-pr-42")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `├─ age           \S+ \(expires in 4d[34]h\)`, out)
	st.Spec.Kept = true
	require.NoError(t, cluster.Client.Update(context.Background(), st))
	out, errOut, err = kubectlPetri(t, cluster.Kubeconfig, "get", "shop-pr-42")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `├─ age           \S+ \(kept by /petri keep\)`, out)
}

// A Gitea environment shows the expiry of its own pull request's state,
// never that of GitHub's pull request of the same path and number: the
// state is read by the environment's forge.
func TestGetShowsTheExpiryOfTheEnvironmentsOwnForge(t *testing.T) {
	ctx := context.Background()
	e := prEnvironment("gitea-shop-pr-43", greeter("web"))
	e.Labels[render.LabelPullRequest] = "43"
	e.Annotations[render.AnnotationForge] = "gitea"
	e.Spec.Source.PullRequest, e.Spec.Source.URL = 43, "https://gitea.example/acme/shop/pulls/43"
	create(t, e)

	state := func(forge string, in time.Duration) *petriv1.PullRequestState {
		at := metav1.NewTime(time.Now().Add(in).Truncate(time.Second))
		st := &petriv1.PullRequestState{
			ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: prstate.Name(prstate.Key{Forge: forge, Repository: "acme/shop", Number: 43})},
			Spec: petriv1.PullRequestStateSpec{Forge: forge, Repository: "acme/shop", Number: 43,
				Applications: []petriv1.ApplicationLifecycle{{Name: "shop", ExpiresAt: &at}}},
		}
		require.NoError(t, cluster.Client.Create(ctx, st))
		t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), st) })
		return st
	}
	github := state("github", 100*time.Hour)
	v := getJSON(t, cluster.Kubeconfig, "gitea-shop-pr-43")
	assert.Equal(t, "gitea", v.Forge)
	assert.NotEqual(t, github.Spec.Applications[0].ExpiresAt.UTC(), v.ExpiresAt.UTC(), "GitHub's pull request's expiry is not the Gitea one's")

	gitea := state("gitea", 200*time.Hour)
	v = getJSON(t, cluster.Kubeconfig, "gitea-shop-pr-43")
	assert.Equal(t, gitea.Spec.Applications[0].ExpiresAt.UTC(), v.ExpiresAt.UTC(), "the Gitea pull request's own expiry")
	out, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "get", "gitea-shop-pr-43")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `├─ age           \S+ \(expires in (7d23h|8d)\)`, out)
}

func containsEnv(items []plugin.Environment, name string) bool {
	for _, e := range items {
		if e.Name == name {
			return true
		}
	}
	return false
}

// logs prints the log of a component's latest Job pod through the API
// server (pods/log), whole or followed; a binding's too.
func TestLogsPrintTheLatestJobPodsLog(t *testing.T) {
	create(t, prEnvironment("logs", greeter("web"), greeter("api", "web")))
	e := waitFor(t, "logs", "Ready", ready)

	out, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "logs", "logs", "web")
	require.NoError(t, err, errOut)
	assert.Contains(t, out, `"msg":"Deployed"`, "the deployer's log of web's install")
	assert.Contains(t, out, `"release":"web"`)
	assert.NotContains(t, out, `"release":"api"`)

	followed, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "logs", "logs", "api", "-f", "--tail", "1")
	require.NoError(t, err, errOut)
	assert.Equal(t, 1, strings.Count(followed, "\n"), "the last line only, and the stream ends with the finished pod: %q", followed)

	both, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "logs", "logs")
	require.NoError(t, err, errOut)
	for _, c := range e.Status.Components {
		assert.Contains(t, both, fmt.Sprintf("==> component %s (job %s) <==", c.Name, c.Job))
	}
	prefixed, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "logs", "logs", "-f")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `(?m)^\[web\] .*Deployed`, prefixed)
	assert.Regexp(t, `(?m)^\[api\] .*Deployed`, prefixed)

	_, _, err = kubectlPetri(t, cluster.Kubeconfig, "logs", "logs", "db")
	assert.ErrorContains(t, err, "environment logs has no component or shared workload db (it has: web, api)")
}

// redeploy asks the operator for a new deploy of every component: new Jobs,
// a new Helm revision, the same spec.
func TestRedeployDeploysEveryComponentAgain(t *testing.T) {
	create(t, prEnvironment("again", greeter("web")))
	before := waitFor(t, "again", "Ready", ready)

	out, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "redeploy", "again", "--wait")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `environment again: redeploy requested \(petri.dev/redeploy=\S+\)\nenvironment again: Ready\n`, out)

	v := getJSON(t, cluster.Kubeconfig, "again")
	web := component(v, "web")
	assert.Equal(t, 2, web.Revision, "the release was upgraded once more")
	require.NotNil(t, web.Job)
	assert.NotEqual(t, before.Status.Components[0].Job, web.Job.Name, "a new Job did it")
	assert.NotEmpty(t, v.LastRedeploy)
	after := waitFor(t, "again", "Ready", ready)
	assert.Equal(t, before.Generation, after.Generation)

	_, _, err = kubectlPetri(t, cluster.Kubeconfig, "redeploy", "missing")
	assert.ErrorContains(t, err, "environment missing in namespace petri-system")
}

func TestOpenPrintsTheURL(t *testing.T) {
	e := prEnvironment("open", greeter("web"))
	create(t, e)
	out, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "open", "open")
	require.NoError(t, err, errOut)
	assert.Equal(t, "http://pr-42.shop.localhost:8480\n", out)

	bare := prEnvironment("no-url", greeter("web"))
	delete(bare.Annotations, render.AnnotationURL)
	create(t, bare)
	_, _, err = kubectlPetri(t, cluster.Kubeconfig, "open", "no-url")
	assert.ErrorContains(t, err, "environment no-url has no URL")
}

// A user who may read environments and Job logs but not Secrets in the
// workload namespace sees the tree without revisions, and a warning that
// says why.
func TestGetAsAUserWithoutSecretsShowsWhatItCan(t *testing.T) {
	ctx := context.Background()
	create(t, prEnvironment("limited", greeter("web")))
	waitFor(t, "limited", "Ready", ready)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "environment-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{petriv1.GroupVersion.Group}, Resources: []string{"ephemeralenvironments"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "pods/log"}, Verbs: []string{"get", "list"}},
		},
	}
	require.NoError(t, cluster.Client.Create(ctx, role))
	require.NoError(t, cluster.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "environment-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "reviewer"}},
	}))
	kubeconfig, err := cluster.WriteKubeconfig("reviewer")
	require.NoError(t, err)

	v := getJSON(t, kubeconfig, "limited")
	assert.Equal(t, "Ready", v.Phase)
	assert.Zero(t, component(v, "web").Revision)
	require.Len(t, v.Warnings, 2, "what it could not read: sync's state of the pull request, the Helm releases")
	assert.Contains(t, v.Warnings[0], "sync's state of the pull request cannot be read")
	assert.Contains(t, v.Warnings[1], "read Helm release revisions in "+v.Namespace)
	for _, w := range v.Warnings {
		assert.Contains(t, w, "forbidden")
	}
	out, _, err := kubectlPetri(t, kubeconfig, "logs", "limited", "web")
	require.NoError(t, err)
	assert.Contains(t, out, "Deployed")
	_, _, err = kubectlPetri(t, kubeconfig, "redeploy", "limited")
	assert.ErrorContains(t, err, "forbidden", "the reviewer may not patch environments")
}
