// Package chart_test checks charts/petri: it lints clean, its values are
// documented and checked by its schema, it renders with default values the
// objects config/default installs, its variants pass a server-side dry run,
// and Petri installed through it (helm install, in-process) runs a pull
// request's life.
package chart_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/deployer"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stacktest.Main(m, &st, stacktest.Config{Prefix: "chart", Setup: func(_ string, _ map[string]string, o *stack.Options) error {
		o.Install = stack.InstallChart
		return nil
	}}))
}

const kubeVersion = "v1.37.2"

func root(t *testing.T) string {
	t.Helper()
	r, err := controlplane.RepoRoot()
	require.NoError(t, err)
	return r
}

func render(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, _, err := stack.RenderChart(values, kubeVersion)
	require.NoError(t, err)
	return objs
}

func key(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		m[key(u)] = u
	}
	return m
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, ok := byKey(objs)[kind+" "+ns+"/"+name]
	require.True(t, ok, "%s %s/%s is rendered", kind, ns, name)
	return u
}

// The chart lints clean with the Helm SDK's linter, with its defaults and
// with every option on.
func TestChartLintsClean(t *testing.T) {
	stacktest.RegisterInputs(t)
	dir, err := stack.ChartDir()
	require.NoError(t, err)
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	require.NoError(t, err)
	for name, values := range map[string]map[string]any{"defaults": nil, "every option": everyOption()} {
		t.Run(name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(dir, values, "default", kv)
			for _, m := range l.Messages {
				assert.Less(t, m.Severity, support.WarningSev, "lint: %s", m)
			}
		})
	}
}

// everyOption turns on every optional object and setting.
func everyOption() map[string]any {
	return map[string]any{
		"imagePullSecrets": []any{map[string]any{"name": "registry"}},
		"operator": map[string]any{
			"stepImages":   []any{"registry.example.com/db-tools:", "registry.example.com/pg:"},
			"extraArgs":    []any{"--concurrency=16"},
			"nodeSelector": map[string]any{"kubernetes.io/os": "linux"},
			"tolerations":  []any{map[string]any{"key": "petri", "operator": "Exists"}},
		},
		"sync": map[string]any{
			"configRepo": map[string]any{"url": "ssh://git@github.com/acme/petri-config.git", "auth": "ssh"},
			"github":     map[string]any{"app": map[string]any{"id": "123456", "installationID": "7654321"}},
			"secret": map[string]any{"create": true, "data": map[string]any{
				"webhook-secret": "w", "github-app-key.pem": "k", "config-ssh-key": "s", "known_hosts": "h",
			}},
			"extraArgs": []any{"-resync-interval=2m"},
			"ingress": map[string]any{
				"enabled": true, "className": "nginx", "hosts": []any{"petri.example.com"}, "api": true, "ui": true,
				"annotations": map[string]any{"cert-manager.io/cluster-issuer": "letsencrypt"},
				"tls":         []any{map[string]any{"hosts": []any{"petri.example.com"}, "secretName": "petri-sync-tls"}},
			},
		},
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
	}
}

// The chart's CRDs, operator RBAC, sync's Roles and the admission fences
// are copies of config/ (make generate makes them), byte for byte, and
// nothing else is there.
func TestChartCopiesOfConfigAreCurrent(t *testing.T) {
	stacktest.RegisterInputs(t)
	r := root(t)
	glob := func(pattern string) []string {
		m, err := filepath.Glob(filepath.Join(r, pattern))
		require.NoError(t, err)
		return m
	}
	pairs := map[string]string{filepath.Join(r, "config/rbac/generated/role.yaml"): filepath.Join(r, "charts/petri/files/operator-rbac.yaml")}
	for _, c := range []struct{ src, dst string }{
		{"config/crd/bases/*.yaml", "charts/petri/crds"},
		{"config/fences/*.yaml", "charts/petri/files/fences"},
		{"config/sync/*role*.yaml", "charts/petri/files/sync"},
		{"config/flowcontrol/*.yaml", "charts/petri/files/flowcontrol"},
	} {
		for _, src := range glob(c.src) {
			if filepath.Base(src) != "kustomization.yaml" {
				pairs[src] = filepath.Join(r, c.dst, filepath.Base(src))
			}
		}
	}
	require.GreaterOrEqual(t, len(pairs), 8)
	copies := map[string]bool{}
	for _, p := range append(glob("charts/petri/crds/*"), append(glob("charts/petri/files/*/*"), glob("charts/petri/files/*.yaml")...)...) {
		copies[p] = true
	}
	for src, dst := range pairs {
		want, err := os.ReadFile(src)
		require.NoError(t, err)
		got, err := os.ReadFile(dst)
		require.NoError(t, err, "make generate copies %s to %s", src, dst)
		assert.True(t, bytes.Equal(want, got), "%s differs from %s: run make generate", dst, src)
		delete(copies, dst)
	}
	assert.Empty(t, copies, "copies of files config/ no longer has: run make generate")
}

// helmLabels are the labels the chart adds and kustomize does not, or the
// other way round; part-of is on every object of both, but Helm does not
// template the CRDs, so it is not compared.
var helmLabels = []string{"app.kubernetes.io/part-of", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

// normalize removes what legitimately differs between the two
// installations: Helm's labels, the chart's checksum annotations that roll
// the pods on a settings change, fields the chart sets to their defaults.
func normalize(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	// One representation of numbers (int64) for both.
	data, err := u.MarshalJSON()
	require.NoError(t, err)
	require.NoError(t, u.UnmarshalJSON(data))
	labels := u.GetLabels()
	for _, l := range helmLabels {
		delete(labels, l)
	}
	if labels["app.kubernetes.io/managed-by"] == "Helm" {
		delete(labels, "app.kubernetes.io/managed-by")
	}
	u.SetLabels(labels)
	if len(labels) == 0 {
		unstructured.RemoveNestedField(u.Object, "metadata", "labels")
	}
	if u.GetKind() == "Deployment" {
		ann, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "annotations")
		for k := range ann {
			if strings.HasPrefix(k, "checksum/") {
				delete(ann, k)
			}
		}
		if len(ann) == 0 {
			unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "annotations")
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			delete(c.(map[string]any), "imagePullPolicy")
		}
		require.NoError(t, unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"))
	}
	if u.GetKind() == "ValidatingAdmissionPolicy" {
		// YAML parsers disagree on the line breaks of a folded scalar with a
		// more-indented line; CEL does not care.
		data, err := u.MarshalJSON()
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, json.Unmarshal(data, &obj))
		u.Object = collapseExpressions(obj).(map[string]any)
		data, err = u.MarshalJSON()
		require.NoError(t, err)
		require.NoError(t, u.UnmarshalJSON(data))
	}
	if u.GetKind() == "Service" {
		if typ, _, _ := unstructured.NestedString(u.Object, "spec", "type"); typ == "ClusterIP" {
			unstructured.RemoveNestedField(u.Object, "spec", "type")
		}
	}
}

// collapseExpressions folds every run of white space in CEL expressions.
func collapseExpressions(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && (k == "expression" || k == "messageExpression") {
				v[k] = strings.Join(strings.Fields(s), " ")
			} else {
				v[k] = collapseExpressions(e)
			}
		}
	case []any:
		for i, e := range v {
			v[i] = collapseExpressions(e)
		}
	}
	return v
}

// kustomizeHash is the suffix kustomize gives a generated ConfigMap.
var kustomizeHash = regexp.MustCompile(`^(petri-sync)-[a-z0-9]{10}$`)

// With default values the chart renders exactly the objects kubectl
// kustomize config/default builds: the same kinds, names and namespaces,
// and the same specs (RBAC rules, CRDs, policy expressions, Deployment
// args, env and securityContext), once Helm's own labels are set aside.
func TestChartRendersWhatConfigDefaultInstalls(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	built, err := st.Kubectl(ctx, "kustomize", filepath.Join(root(t), "config", "default"))
	require.NoError(t, err)
	// kustomize names the sync ConfigMap after its content; the chart rolls
	// the pod with a checksum instead.
	for _, line := range strings.Split(built, "\n") {
		name := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "name:"))
		if m := kustomizeHash.FindStringSubmatch(name); m != nil {
			built = strings.ReplaceAll(built, name, m[1])
		}
	}
	fromConfig := decode(t, built)
	fromChart := render(t, nil)

	want, got := byKey(fromConfig), byKey(fromChart)
	assert.Equal(t, sortedKeys(want), sortedKeys(got), "the chart renders the objects of config/default")
	require.GreaterOrEqual(t, len(want), 20)
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			continue
		}
		normalize(t, w)
		normalize(t, g)
		assert.Equal(t, w.Object, g.Object, "%s: the chart's object differs from config/default's", k)
	}
}

func decode(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			require.ErrorIs(t, err, io.EOF)
			return out
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

func sortedKeys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Every value is documented twice: a comment above its key in values.yaml
// and a description in values.schema.json, which knows every key.
func TestEveryValueIsDocumentedAndChecked(t *testing.T) {
	stacktest.RegisterInputs(t)
	dir, err := stack.ChartDir()
	require.NoError(t, err)
	var schema map[string]any
	data, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &schema))
	var doc yaml.Node
	data, err = os.ReadFile(filepath.Join(dir, "values.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &doc))

	var checked int
	var walk func(path string, n *yaml.Node, s map[string]any)
	walk = func(path string, n *yaml.Node, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		if n.Kind != yaml.MappingNode || props == nil {
			return
		}
		for i := 0; i < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := strings.TrimPrefix(path+"."+k.Value, ".")
			ps, ok := props[k.Value].(map[string]any)
			if !assert.True(t, ok, "values.schema.json knows %s", p) {
				continue
			}
			assert.NotEmpty(t, ps["description"], "values.schema.json describes %s", p)
			assert.True(t, strings.HasPrefix(strings.TrimSpace(k.HeadComment), "#"), "values.yaml has a comment above %s", p)
			checked++
			walk(p, v, ps)
		}
	}
	walk("", doc.Content[0], schema)
	assert.GreaterOrEqual(t, checked, 40)
}

// The schema refuses mistakes before anything is rendered, naming them.
func TestSchemaRefusesMistakes(t *testing.T) {
	stacktest.RegisterInputs(t)
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"misspelt key", map[string]any{"operator": map[string]any{"stepImage": []any{"x:"}}}, "stepImage"},
		{"unknown auth", map[string]any{"sync": map[string]any{"configRepo": map[string]any{"auth": "password"}}}, "/sync/configRepo/auth"},
		{"bad namespace", map[string]any{"namespaces": map[string]any{"management": "Petri_System"}}, "Petri_System"},
		{"comma in a step image", map[string]any{"operator": map[string]any{"stepImages": []any{"a:,b:"}}}, "a:,b:"},
		{"unknown Pod Security level", map[string]any{"operator": map[string]any{"workloadPodSecurity": "strict"}}, "/operator/workloadPodSecurity"},
		{"unknown Secret key", map[string]any{"sync": map[string]any{"secret": map[string]any{"create": true, "data": map[string]any{"token": "x"}}}}, "token"},
		{"App without installation", map[string]any{"sync": map[string]any{"github": map[string]any{"app": map[string]any{"id": "1"}}}}, "installationID is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := stack.RenderChart(tc.values, kubeVersion)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func args(t *testing.T, objs []*unstructured.Unstructured, ns, name string) []string {
	t.Helper()
	var d appsv1.Deployment
	u := find(t, objs, "Deployment", ns, name)
	require.NoError(t, fromUnstructured(u, &d))
	return d.Spec.Template.Spec.Containers[0].Args
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	data, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// Each option renders what it promises.
func TestChartOptions(t *testing.T) {
	stacktest.RegisterInputs(t)
	t.Run("every option", func(t *testing.T) {
		objs := render(t, everyOption())
		cm := find(t, objs, "ConfigMap", "petri-system", "petri-operator")
		assert.Equal(t, "registry.example.com/db-tools:,registry.example.com/pg:", cm.Object["data"].(map[string]any)["step-images"])
		assert.Contains(t, args(t, objs, "petri-system", "petri-operator"), "--concurrency=16")
		sync := args(t, objs, "petri-sync", "petri-sync")
		assert.Contains(t, sync, "-github-app-id=123456")
		assert.Contains(t, sync, "-github-installation-id=7654321")
		assert.Contains(t, sync, "-github-app-key-file=/etc/petri-sync/secrets/github-app-key.pem")
		assert.Contains(t, sync, "-config-ssh-key-file=/etc/petri-sync/secrets/config-ssh-key")
		assert.Contains(t, sync, "-config-known-hosts-file=/etc/petri-sync/secrets/known_hosts")
		assert.Contains(t, sync, "-resync-interval=2m")
		for _, a := range sync {
			assert.NotContains(t, a, "github-token", "App and ssh auth read no token")
		}
		secret := find(t, objs, "Secret", "petri-sync", "petri-sync")
		assert.Len(t, secret.Object["data"], 4)
		ing := find(t, objs, "Ingress", "petri-sync", "petri-sync")
		rules, _, _ := unstructured.NestedSlice(ing.Object, "spec", "rules")
		require.Len(t, rules, 1)
		assert.Equal(t, "petri.example.com", rules[0].(map[string]any)["host"])
		paths, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "http", "paths")
		var routed []string
		for _, p := range paths {
			routed = append(routed, p.(map[string]any)["path"].(string))
		}
		assert.Equal(t, []string{"/webhooks/", "/api/", "/", "/ui/"}, routed, "api routes the read API, ui the web page too")
		assert.Equal(t, "nginx", ing.Object["spec"].(map[string]any)["ingressClassName"])
		assert.Len(t, ing.Object["spec"].(map[string]any)["tls"], 1)
		for _, name := range []string{"petri-operator", "petri-sync"} {
			ns := map[string]string{"petri-operator": "petri-system", "petri-sync": "petri-sync"}[name]
			sm := find(t, objs, "ServiceMonitor", ns, name)
			assert.Equal(t, "prometheus", sm.GetLabels()["release"])
		}
		var d appsv1.Deployment
		require.NoError(t, fromUnstructured(find(t, objs, "Deployment", "petri-system", "petri-operator"), &d))
		assert.Equal(t, "registry", d.Spec.Template.Spec.ImagePullSecrets[0].Name)
		assert.Equal(t, "linux", d.Spec.Template.Spec.NodeSelector["kubernetes.io/os"])
		assert.Len(t, d.Spec.Template.Spec.Tolerations, 1)
	})
	t.Run("workload Pod Security level", func(t *testing.T) {
		// The operator and the fences read it from the one ConfigMap.
		for want, values := range map[string]map[string]any{"baseline": nil, "restricted": {"operator": map[string]any{"workloadPodSecurity": "restricted"}}} {
			objs := render(t, values)
			got, _, _ := unstructured.NestedString(find(t, objs, "ConfigMap", "petri-system", "petri-operator").Object, "data", "workload-pod-security")
			assert.Equal(t, want, got)
			assert.Contains(t, args(t, objs, "petri-system", "petri-operator"), "--workload-pod-security=$(WORKLOAD_POD_SECURITY)")
		}
	})
	t.Run("settings roll the pods", func(t *testing.T) {
		checksum := func(objs []*unstructured.Unstructured, ns, name string) string {
			a, _, _ := unstructured.NestedString(find(t, objs, "Deployment", ns, name).Object, "spec", "template", "metadata", "annotations", "checksum/config")
			return a
		}
		before := render(t, nil)
		after := render(t, map[string]any{"operator": map[string]any{"stepImages": []any{"x:"}}, "sync": map[string]any{"configRepo": map[string]any{"branch": "next"}}})
		assert.NotEqual(t, checksum(before, "petri-system", "petri-operator"), checksum(after, "petri-system", "petri-operator"))
		restricted := render(t, map[string]any{"operator": map[string]any{"workloadPodSecurity": "restricted"}})
		assert.NotEqual(t, checksum(before, "petri-system", "petri-operator"), checksum(restricted, "petri-system", "petri-operator"), "the operator reads its level at start")
		assert.NotEqual(t, checksum(before, "petri-sync", "petri-sync"), checksum(after, "petri-sync", "petri-sync"))
	})
	t.Run("ingress publishes the webhook only", func(t *testing.T) {
		// The read API and /wake ask for no credential: a private
		// repository's branches, commits and errors stay unpublished
		// unless sync.ingress.api says otherwise.
		objs := render(t, map[string]any{"sync": map[string]any{"ingress": map[string]any{"enabled": true}}})
		ing := find(t, objs, "Ingress", "petri-sync", "petri-sync")
		rules, _, _ := unstructured.NestedSlice(ing.Object, "spec", "rules")
		require.Len(t, rules, 1)
		paths, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "http", "paths")
		require.Len(t, paths, 1)
		assert.Equal(t, "/webhooks/", paths[0].(map[string]any)["path"])
	})
	t.Run("other forges", func(t *testing.T) {
		objs := render(t, map[string]any{"sync": map[string]any{
			"github":     map[string]any{"enabled": false},
			"configRepo": map[string]any{"tokenKey": "gitlab-token"},
			"gitea":      map[string]any{"url": "https://gitea.example.com/"},
			"gitlab":     map[string]any{"url": "https://gitlab.example.com/"},
		}})
		sync := args(t, objs, "petri-sync", "petri-sync")
		for _, want := range []string{
			"-gitea-url=https://gitea.example.com/", "-gitea-token-file=/etc/petri-sync/secrets/gitea-token", "-gitea-webhook-secret-file=/etc/petri-sync/secrets/gitea-webhook-secret",
			"-gitlab-url=https://gitlab.example.com/", "-gitlab-token-file=/etc/petri-sync/secrets/gitlab-token", "-gitlab-webhook-secret-file=/etc/petri-sync/secrets/gitlab-webhook-secret",
		} {
			assert.Contains(t, sync, want)
		}
		assert.Contains(t, sync, "-config-token-file=/etc/petri-sync/secrets/gitlab-token")
		for _, a := range sync {
			assert.NotContains(t, a, "forgejo", "Forgejo is not served without its url")
			assert.NotContains(t, a, "github-token", "GitHub is off")
			assert.NotContains(t, a, "-webhook-secret-file=/etc/petri-sync/secrets/webhook-secret", "GitHub is off")
		}
		_, _, err := stack.RenderChart(map[string]any{"sync": map[string]any{"github": map[string]any{"enabled": false}}}, kubeVersion)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "sync serves no forge")
	})
	t.Run("other namespaces", func(t *testing.T) {
		objs := render(t, map[string]any{"namespaces": map[string]any{"management": "ci-system", "shared": "ci-shared", "sync": "ci-sync"}})
		for _, u := range objs {
			data, err := u.MarshalJSON()
			require.NoError(t, err)
			if u.GetKind() != "CustomResourceDefinition" {
				assert.NotContains(t, string(data), "petri-system", "%s names the default namespace", key(u))
			}
		}
		policy := find(t, objs, "ValidatingAdmissionPolicy", "", "petri-operator-jobs")
		data, _ := policy.MarshalJSON()
		assert.Contains(t, string(data), "system:serviceaccount:ci-system:petri-operator", "the fences match the operator of the new namespace")
		assert.Contains(t, args(t, objs, "ci-system", "petri-operator"), "--shared-namespace=ci-shared")
		assert.Contains(t, args(t, objs, "ci-sync", "petri-sync"), "-namespace=ci-system")
		binding := find(t, objs, "RoleBinding", "ci-system", "petri-sync")
		subj, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
		assert.Equal(t, "ci-sync", subj[0].(map[string]any)["namespace"])
	})
	t.Run("off", func(t *testing.T) {
		objs := render(t, map[string]any{"fences": map[string]any{"enabled": false}, "sync": map[string]any{"enabled": false}, "namespaces": map[string]any{"create": false}})
		for _, u := range objs {
			assert.NotContains(t, []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Namespace"}, u.GetKind(), key(u))
			assert.NotEqual(t, "petri-sync", u.GetNamespace(), key(u))
		}
		assert.Contains(t, args(t, objs, "petri-system", "petri-operator"), "--require-fences=false", "the operator starts without fences")
		assert.NotContains(t, args(t, render(t, nil), "petri-system", "petri-operator"), "--require-fences=false")
	})
}

// The API server accepts every object of the chart, with its defaults and
// with the options a cluster here can hold (no ServiceMonitor CRD), in a
// server-side dry run: schemas, CEL rules, RBAC escalation checks.
func TestChartPassesServerDryRun(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	opts := everyOption()
	delete(opts, "serviceMonitor")
	for name, values := range map[string]map[string]any{"defaults": nil, "options": opts} {
		t.Run(name, func(t *testing.T) {
			objs := render(t, values)
			require.NotEmpty(t, objs)
			for _, u := range objs {
				err := st.Client.Patch(ctx, u, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner("petri-chart-test"))
				assert.NoError(t, err, "server dry run of %s", key(u))
			}
		})
	}
	// And it refuses what is wrong, so the dry run means something.
	objs := render(t, nil)
	d := find(t, objs, "Deployment", "petri-system", "petri-operator")
	require.NoError(t, unstructured.SetNestedField(d.Object, int64(-1), "spec", "replicas"))
	assert.Error(t, st.Client.Patch(ctx, d, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner("petri-chart-test")))
}

// Petri installed with helm install of charts/petri plays a pull request's
// life: opened, pushed to, closed, every step checked.
func TestPullRequestLifecycleOnTheChart(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	cfg, err := deployer.NewActionConfig(deployer.NewRESTClientGetter(st.Kubeconfig(), stack.ChartReleaseNamespace), stack.ChartReleaseNamespace, logr.Discard())
	require.NoError(t, err)
	rel, err := action.NewGet(cfg).Run(stack.ChartRelease)
	require.NoError(t, err)
	assert.Equal(t, release.StatusDeployed, rel.Info.Status)
	// sync runs as two replicas, one of which leads.
	replicas := map[client.ObjectKey]int32{{Namespace: stack.ManagementNamespace, Name: "petri-operator"}: 1, {Namespace: stack.SyncNamespace, Name: "petri-sync"}: 2}
	for k, n := range replicas {
		var d appsv1.Deployment
		require.NoError(t, st.Client.Get(ctx, k, &d))
		assert.Equal(t, "Helm", d.Labels["app.kubernetes.io/managed-by"], "%s is the chart's", k)
		assert.Equal(t, ptr.To(n), d.Spec.Replicas, "%s", k)
	}

	// The chart's Ingress (sync.ingress.ui) serves sync's web page, as the
	// overlay's does.
	resp, err := http.Get(st.IngressURL + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "sync's web page through the chart's Ingress")

	sc := &stack.Scenario{Stack: st, Report: stack.NewReport(os.Stderr), Number: 3, StepTimeout: 2 * time.Minute}
	res, err := sc.Run(ctx)
	require.NoError(t, err)
	require.Len(t, res.Steps, 5)
	require.Len(t, res.Pages, 2)
	assert.Equal(t, int32(1), res.Sleep.Restored, "the environment slept and woke")
	assert.Contains(t, res.Pages[1], "commit: "+res.SHAs[1]+"\n")
	assert.Contains(t, res.Pages[1], "database: "+res.Database+" (ready)", "the application reads its binding")
}
