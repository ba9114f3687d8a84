package e2e_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/node"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	// Three control planes: the management cluster and two workload
	// clusters, east and west (docs/clusters.md).
	os.Exit(stacktest.Main(m, &st, stacktest.Config{Prefix: "e2e", Setup: func(_ string, _ map[string]string, o *stack.Options) error {
		o.Clusters = 3
		return nil
	}}))
}

// TestPullRequestLifecycle is make demo: a pull request is opened, pushed to
// and closed, and every step must reach its expected state.
func TestPullRequestLifecycle(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	sc := &stack.Scenario{Stack: st, Report: stack.NewReport(os.Stderr), Number: 1, StepTimeout: 2 * time.Minute}
	res, err := sc.Run(ctx)
	require.NoError(t, err)

	require.Len(t, res.Steps, 6, "with two workload clusters, the placement step too")
	require.Len(t, res.SHAs, 2)
	// Two pull requests of the spread application, Ready in the two
	// workload clusters, one each (the step checked each namespace with
	// its cluster's API server, and both gone after the close), each bound
	// to the shared store deployed in its cluster.
	require.Len(t, res.Placed, 2)
	assert.ElementsMatch(t, []string{"east", "west"}, []string{res.Placed[0].Cluster, res.Placed[1].Cluster})
	for _, p := range res.Placed {
		assert.Equal(t, "store."+p.Cluster, p.Store, "%s is bound to the shared store of its own cluster", p.Environment)
	}
	assert.NotEqual(t, res.SHAs[0], res.SHAs[1])
	assert.True(t, strings.HasPrefix(res.URL, st.IngressURL+"/"+res.Environment), "the URL %s is served by the local ingress", res.URL)
	assert.True(t, strings.HasPrefix(res.Namespace, res.Environment+"-"), "namespace %s derives from %s", res.Namespace, res.Environment)
	require.Len(t, res.Revisions, 2)
	assert.Equal(t, res.Revisions[0]+1, res.Revisions[1], "the push upgraded the release in place")
	require.Len(t, res.Pages, 2)
	assert.Contains(t, res.Pages[0], "commit: "+res.SHAs[0]+"\n")
	assert.Contains(t, res.Pages[1], "commit: "+res.SHAs[1]+"\n")
	assert.NotContains(t, res.Pages[1], res.SHAs[0], "after the push the old commit is gone")
	assert.Contains(t, res.Pages[1], "database: "+res.Database+" (ready)", "the application reads its binding")
	assert.Equal(t, []string{"DATABASE", "STORE_URL"}, res.BindingKeys, "the environment's own keys, no instance key")

	// Asleep, the application's one replica was recorded and its URL did
	// not answer; awake, exactly that replica is back and the page answers.
	assert.Equal(t, "1", res.Sleep.Recorded)
	assert.Equal(t, int32(1), res.Sleep.Restored)
	assert.NotEqual(t, http.StatusOK, res.Sleep.AsleepAnswer)
	assert.Contains(t, res.Sleep.Page, "commit: "+res.SHAs[1]+"\n")
	t.Logf("sleep: asleep %s, pods gone %s after the request; wake: Ready %s, URL answering %s after the request",
		res.Sleep.Asleep.Round(time.Millisecond), res.Sleep.PodsGone.Round(time.Millisecond), res.Sleep.Ready.Round(time.Millisecond), res.Sleep.Answering.Round(time.Millisecond))

	// Nothing of the environment is left.
	var envs petriv1.EphemeralEnvironmentList
	require.NoError(t, st.Client.List(ctx, &envs, client.InNamespace(stack.ManagementNamespace)))
	assert.Empty(t, envs.Items)
	err = st.Client.Get(ctx, client.ObjectKey{Name: res.Namespace}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "namespace %s is deleted: %v", res.Namespace, err)

	// The operator and sync ran as the Deployments of config/default, under
	// their own ServiceAccounts, and never restarted.
	var pods, syncPods corev1.PodList
	require.NoError(t, st.Client.List(ctx, &pods, client.InNamespace(stack.ManagementNamespace), client.HasLabels{"app.kubernetes.io/name"}))
	require.NoError(t, st.Client.List(ctx, &syncPods, client.InNamespace(stack.SyncNamespace), client.HasLabels{"app.kubernetes.io/name"}))
	accounts := map[string]string{}
	for _, p := range append(pods.Items, syncPods.Items...) {
		require.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
		accounts[p.Labels["app.kubernetes.io/name"]] = p.Spec.ServiceAccountName
		for _, cs := range p.Status.ContainerStatuses {
			assert.Zero(t, cs.RestartCount, "container %s of %s restarted", cs.Name, p.Name)
		}
	}
	assert.Equal(t, map[string]string{"petri-operator": "petri-operator", "petri-sync": "petri-sync"}, accounts)
}

// TestPullRequestsFromAnotherProcess drives pull requests the way
// "petri-local pr" does against make run.
func TestPullRequestsFromAnotherProcess(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	srv := httptest.NewServer(st.ControlHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	out, err := stack.Control(ctx, addr, "open", 7, "Try the control endpoint")
	require.NoError(t, err)
	assert.Contains(t, out, `pull request #7 "Try the control endpoint" opened`)
	_, err = stack.Control(ctx, addr, "open", 7, "")
	require.ErrorContains(t, err, "exists already")
	_, err = stack.Control(ctx, addr, "push", 8, "")
	require.ErrorContains(t, err, "no pull request #8")

	env := func() *petriv1.EphemeralEnvironment {
		var envs petriv1.EphemeralEnvironmentList
		if err := st.Client.List(ctx, &envs, client.InNamespace(stack.ManagementNamespace), client.MatchingLabels{"petri.dev/pull-request": "7"}); err != nil || len(envs.Items) != 1 {
			return nil
		}
		return &envs.Items[0]
	}
	require.Eventually(t, func() bool { return env() != nil }, time.Minute, 100*time.Millisecond, "sync writes the environment")
	pr, ok := st.PullRequest(7)
	require.True(t, ok)
	assert.Equal(t, pr.HeadSHA, env().Spec.Source.SHA)

	_, err = stack.Control(ctx, addr, "push", 7, "")
	require.NoError(t, err)
	pr, _ = st.PullRequest(7)
	require.Eventually(t, func() bool { e := env(); return e != nil && e.Spec.Source.SHA == pr.HeadSHA }, time.Minute, 100*time.Millisecond, "sync follows the push")

	_, err = stack.Control(ctx, addr, "close", 7, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return env() == nil }, 2*time.Minute, 100*time.Millisecond, "the environment is torn down")
}

// TestInstallManifestsPassServerDryRun runs the install command of
// docs/install.md with --dry-run=server for config/default and the sample
// overlays: the API server validates every object (schemas, CEL rules, RBAC
// escalation checks) and stores none.
func TestInstallManifestsPassServerDryRun(t *testing.T) {
	stacktest.RegisterInputs(t)
	root, err := controlplane.RepoRoot()
	require.NoError(t, err)
	for _, dir := range []string{"config/default", "config/samples/install", "config/samples/github-app", "config/samples/gitlab"} {
		t.Run(dir, func(t *testing.T) {
			ctx := context.Background()
			built, err := st.Kubectl(ctx, "kustomize", filepath.Join(root, dir))
			require.NoError(t, err)
			objs := manifests(t, built)
			require.GreaterOrEqual(t, len(objs), 15)

			out, err := st.Kubectl(ctx, "apply", "-k", filepath.Join(root, dir), "--dry-run=server")
			require.NoError(t, err, out)
			for _, o := range objs {
				assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(strings.ToLower(o.GetKind()))+`(\.[a-z0-9.]+)?/`+regexp.QuoteMeta(o.GetName())+` (created|configured|unchanged) \(server dry run\)$`, out,
					"%s %s is accepted", o.GetKind(), o.GetName())
			}
			// Nothing was stored: the overlay's own ConfigMap (the local
			// installation used other settings, hence another name) does not
			// exist, and the operator's settings are still the local ones.
			for _, o := range objs {
				if o.GetKind() == "ConfigMap" && o.GetName() == "petri-operator" {
					var stored corev1.ConfigMap
					require.NoError(t, st.Client.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, &stored))
					data, _, _ := unstructured.NestedStringMap(o.Object, "data")
					assert.NotEqual(t, data, stored.Data, "a dry run changed ConfigMap petri-operator")
					continue
				}
				if o.GetKind() == "ConfigMap" {
					err := st.Client.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, &corev1.ConfigMap{})
					assert.True(t, apierrors.IsNotFound(err), "a dry run stored ConfigMap %s", o.GetName())
				}
			}
		})
	}
}

func manifests(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifests.yaml")
	require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
	objs, err := controlplane.ReadManifests(f)
	require.NoError(t, err)
	return objs
}

// TestDemoConfigRepositoryLoads keeps examples/app/config-repo valid for sync.
func TestDemoConfigRepositoryLoads(t *testing.T) {
	stacktest.RegisterInputs(t)
	root, err := controlplane.RepoRoot()
	require.NoError(t, err)
	dir := filepath.Join(root, "examples", "app", "config-repo")
	files := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	}))
	cfg := config.Load(files)
	require.Empty(t, cfg.Errors)
	require.Len(t, cfg.Applications, 1)
	app := cfg.Applications[0]
	assert.Equal(t, stack.DemoRepository, app.Repository)
	assert.Equal(t, []string{stack.DemoLabel}, app.Trigger.Labels)
	assert.Contains(t, app.URL, stack.DefaultIngressAddress, "the local run rewrites the ingress address in the URL")
	require.Len(t, cfg.SharedWorkloads, 1)
	assert.Equal(t, "store", cfg.SharedWorkloads[0].Name)
}

// TestManagementNamespaceIsRestricted: petri-system enforces the restricted
// Pod Security Standard, so every Job the scenario ran met it.
func TestManagementNamespaceIsRestricted(t *testing.T) {
	stacktest.RegisterInputs(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.ManagementNamespace, Name: "privileged"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: stack.ExampleAppImage, SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		}}},
	}
	err := st.Client.Create(context.Background(), pod, client.DryRunAll)
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "refused by admission: %v", err)
	assert.Contains(t, err.Error(), `violates PodSecurity "restricted`)
}

// TestStoppingSyncReplicaAnswersUntilItLeaves deletes a sync pod: for its
// drain the replica still answers webhooks at its own address while its
// readiness fails, so a delivery already routed to it is not dropped; then
// it leaves, and its replacement is ready.
func TestStoppingSyncReplicaAnswersUntilItLeaves(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	var pods corev1.PodList
	require.NoError(t, st.Client.List(ctx, &pods, client.InNamespace(stack.SyncNamespace), client.HasLabels{"app.kubernetes.io/name"}))
	require.NotEmpty(t, pods.Items)
	victim := pods.Items[0]
	port, ok := node.PodPorts(&victim)[8080]
	require.True(t, ok, "pod %s has no local port for 8080", victim.Name)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	direct := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	get := func(path string) int {
		resp, err := direct.Get(base + path)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get("/readyz"))

	require.NoError(t, st.Client.Delete(ctx, &victim))
	require.Eventually(t, func() bool { return get("/readyz") == http.StatusServiceUnavailable }, 10*time.Second, 20*time.Millisecond,
		"the stopping replica says it is not ready while it still answers")
	ping := githubapi.Delivery{Event: "ping", Body: []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)}
	resp, err := ping.Send(ctx, direct, base+"/webhooks/github", st.WebhookSecret)
	require.NoError(t, err, "a delivery to the draining replica is answered")
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(st.Client.Get(ctx, client.ObjectKeyFromObject(&victim), &corev1.Pod{}))
	}, time.Minute, 50*time.Millisecond, "the pod leaves within its grace period")
	require.NoError(t, st.WaitRollouts(ctx), "a new replica takes its place")
}
