package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
)

var env *controlplane.Cluster

func TestMain(m *testing.M) {
	var err error
	env, err = controlplane.Start(controlplane.Options{Controllers: []string{"namespace-controller"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

func namespace(t *testing.T) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), "crd")
	require.NoError(t, err)
	return ns
}

// readExample loads an example manifest as unstructured, in namespace ns.
func readExample(t *testing.T, name, ns string) *unstructured.Unstructured {
	t.Helper()
	root, err := controlplane.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "examples", name))
	require.NoError(t, err)
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal(data, &u.Object))
	u.SetNamespace(ns)
	return u
}

func TestExamplesAreAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	for _, f := range []string{"ephemeralenvironment.yaml", "sharedworkload.yaml"} {
		u := readExample(t, f, ns)
		require.NoError(t, env.Client.Create(ctx, u), f)
	}
	// The typed client reads them back with every field.
	var ee petriv1.EphemeralEnvironment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pr-42"}, &ee))
	require.Len(t, ee.Spec.Components, 3)
	assert.Equal(t, []string{"api"}, ee.Spec.Components[1].DependsOn)
	assert.Equal(t, "72h0m0s", ee.Spec.TTL.Duration.String())
	assert.Equal(t, 42, ee.Spec.Source.PullRequest)
	assert.JSONEq(t, `{"image":{"tag":"3f9c2e1"}}`, string(ee.Spec.Values["api"].Raw))
	var sw petriv1.SharedWorkload
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "postgres"}, &sw))
	assert.Equal(t, []string{"admin-password"}, sw.Spec.InstanceSecret.Keys)
	assert.Equal(t, "env_{{ .Hash }}", sw.Spec.Binding["database"])
}

func TestInstanceSecretLengthDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := readExample(t, "sharedworkload.yaml", namespace(t))
	require.NoError(t, unstructured.SetNestedField(u.Object, map[string]any{"keys": []any{"k"}}, "spec", "instanceSecret"))
	require.NoError(t, env.Client.Create(ctx, u))
	var sw petriv1.SharedWorkload
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(u), &sw))
	assert.Equal(t, int32(32), sw.Spec.InstanceSecret.Length)
}

func TestValidationRejectsBadEnvironments(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cases := []struct {
		name   string
		mutate func(spec map[string]any)
		want   []string
	}{
		{
			name: "duplicate component names",
			mutate: func(spec map[string]any) {
				comps := spec["components"].([]any)
				dup := deepCopy(comps[0])
				spec["components"] = append(comps, dup)
			},
			want: []string{"spec.components[3]", "Duplicate value", `"api"`},
		},
		{
			name: "placement names a cluster and a selector",
			mutate: func(spec map[string]any) {
				spec["placement"] = map[string]any{"cluster": "east", "selector": map[string]any{"matchLabels": map[string]any{"region": "eu"}}}
			},
			want: []string{"placement names either a cluster or a selector, not both and not neither"},
		},
		{
			name: "placement names nothing",
			mutate: func(spec map[string]any) {
				spec["placement"] = map[string]any{"strategy": "Spread"}
			},
			want: []string{"placement names either a cluster or a selector, not both and not neither"},
		},
		{
			name: "placement strategy unknown",
			mutate: func(spec map[string]any) {
				spec["placement"] = map[string]any{"cluster": "east", "strategy": "Random"}
			},
			want: []string{"spec.placement.strategy", "Unsupported value"},
		},
		{
			name: "dependsOn names an unknown component",
			mutate: func(spec map[string]any) {
				comp(spec, "web")["dependsOn"] = []any{"api", "cache"}
			},
			want: []string{"every dependsOn entry must name a component in spec.components"},
		},
		{
			name: "self dependency",
			mutate: func(spec map[string]any) {
				comp(spec, "worker")["dependsOn"] = []any{"worker"}
			},
			want: []string{"component worker cannot depend on itself"},
		},
		{
			name: "uses a shared workload that is not listed",
			mutate: func(spec map[string]any) {
				comp(spec, "web")["uses"] = []any{"redis"}
			},
			want: []string{"every uses entry must name a shared workload in spec.sharedWorkloads"},
		},
		{
			name: "component name is not DNS-1123",
			mutate: func(spec map[string]any) {
				comp(spec, "web")["name"] = "Web_UI"
				delete(spec["values"].(map[string]any), "web")
			},
			want: []string{"spec.components[2].name", "should match"},
		},
		{
			name: "component name too long for a release",
			mutate: func(spec map[string]any) {
				comp(spec, "web")["name"] = strings.Repeat("w", 54)
				delete(spec["values"].(map[string]any), "web")
			},
			want: []string{"spec.components[2].name", "Too long"},
		},
		{
			name: "chart version is a range",
			mutate: func(spec map[string]any) {
				comp(spec, "api")["chart"].(map[string]any)["version"] = "~1.4"
			},
			want: []string{"version ~1.4 must be an exact semantic version"},
		},
		{
			name: "chart repository over plain http",
			mutate: func(spec map[string]any) {
				comp(spec, "worker")["chart"].(map[string]any)["repository"] = "http://charts.example.com"
			},
			want: []string{"repository http://charts.example.com must be an https:// chart repository"},
		},
		{
			name: "no components",
			mutate: func(spec map[string]any) {
				spec["components"] = []any{}
				delete(spec, "values")
			},
			want: []string{"spec.components", "should have at least 1 items"},
		},
		{
			name: "shared workload name is not DNS-1123",
			mutate: func(spec map[string]any) {
				spec["sharedWorkloads"] = []any{"Postgres"}
				for _, c := range spec["components"].([]any) {
					delete(c.(map[string]any), "uses")
				}
			},
			want: []string{"spec.sharedWorkloads[0]", "should match"},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := readExample(t, "ephemeralenvironment.yaml", ns)
			u.SetName(fmt.Sprintf("bad-%d", i))
			spec := u.Object["spec"].(map[string]any)
			tc.mutate(spec)
			err := env.Client.Create(context.Background(), u)
			require.Error(t, err)
			require.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func comp(spec map[string]any, name string) map[string]any {
	for _, c := range spec["components"].([]any) {
		if m := c.(map[string]any); m["name"] == name {
			return m
		}
	}
	panic("no component " + name)
}

func deepCopy(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}

// kubectl get asks the API server for a Table; the printer columns are what
// it shows.
func TestPrinterColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, readExample(t, "ephemeralenvironment.yaml", ns)))
	var ee petriv1.EphemeralEnvironment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pr-42"}, &ee))
	ee.Status.TargetNamespace = "shop-pr-42-3f9c"
	ee.Status.Phase = petriv1.EnvironmentReady
	ee.Status.Conditions = []metav1.Condition{{Type: petriv1.ConditionReady, Status: metav1.ConditionTrue, Reason: petriv1.ReasonSucceeded, LastTransitionTime: metav1.Now()}}
	require.NoError(t, env.Client.Status().Update(ctx, &ee))

	table := &metav1.Table{}
	err := env.Clientset.CoreV1().RESTClient().Get().
		AbsPath("/apis/petri.dev/v1alpha1/namespaces", ns, "ephemeralenvironments").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Do(ctx).Into(table)
	require.NoError(t, err)
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	// Cluster has priority 1: kubectl shows it with -o wide.
	assert.Equal(t, []string{"Name", "Namespace", "Phase", "Ready", "Cluster", "Age"}, cols)
	require.Len(t, table.Rows, 1)
	assert.Equal(t, []any{"shop-pr-42", "shop-pr-42-3f9c", "Ready", "True"}, table.Rows[0].Cells[:4])

	// The short names resolve through discovery, as kubectl ee / kubectl sw.
	resources, err := env.Clientset.Discovery().ServerResourcesForGroupVersion("petri.dev/v1alpha1")
	require.NoError(t, err)
	short := map[string][]string{}
	for _, r := range resources.APIResources {
		short[r.Name] = r.ShortNames
	}
	assert.Equal(t, []string{"ee"}, short["ephemeralenvironments"])
	assert.Equal(t, []string{"sw"}, short["sharedworkloads"])
}

// Status is a subresource: a spec write cannot change it.
func TestStatusIsASubresource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, readExample(t, "ephemeralenvironment.yaml", ns)))
	var ee petriv1.EphemeralEnvironment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-pr-42"}, &ee))
	ee.Status.TargetNamespace = "sneaky"
	require.NoError(t, env.Client.Update(ctx, &ee))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(&ee), &ee))
	assert.Empty(t, ee.Status.TargetNamespace)
}

// status.cluster is committed once: the API server refuses to change or
// clear it, whoever writes.
func TestClusterIsCommittedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	ee := readExample(t, "ephemeralenvironment.yaml", ns)
	require.NoError(t, env.Client.Create(ctx, ee))
	var got petriv1.EphemeralEnvironment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ee), &got))
	got.Status.Cluster, got.Status.TargetNamespace = "east", "shop-pr-42-3f9c"
	require.NoError(t, env.Client.Status().Update(ctx, &got))
	for _, c := range []string{"west", ""} {
		got.Status.Cluster = c
		err := env.Client.Status().Update(ctx, &got)
		require.Error(t, err, "cluster %q", c)
		assert.True(t, apierrors.IsInvalid(err), err)
		assert.Contains(t, err.Error(), "status.cluster is committed once and never changes")
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ee), &got))
		assert.Equal(t, "east", got.Status.Cluster)
	}
}
