package chart_test

import (
	"context"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

func renderWorkload(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, _, err := stack.RenderWorkloadChart(values, kubeVersion)
	require.NoError(t, err)
	return objs
}

// kinds counts the objects of each kind.
func kinds(objs []*unstructured.Unstructured) map[string]int {
	m := map[string]int{}
	for _, u := range objs {
		m[u.GetKind()]++
	}
	return m
}

// In a workload cluster the chart installs only what the management
// cluster's operator needs there: the management and shared namespaces, the
// ServiceAccount petri-operator with the RBAC it has in a single cluster,
// the ConfigMap its fences read, the fences and the FlowSchemas. No
// Deployment, no CRD, nothing of sync.
func TestChartWorkloadModeRendersOnlyWhatAWorkloadClusterNeeds(t *testing.T) {
	stacktest.RegisterInputs(t)
	objs := renderWorkload(t, nil)
	assert.Equal(t, map[string]int{
		"Namespace":                        2,
		"ServiceAccount":                   1,
		"ClusterRole":                      1,
		"ClusterRoleBinding":               1,
		"Role":                             1,
		"RoleBinding":                      1,
		"ConfigMap":                        1,
		"ValidatingAdmissionPolicy":        3,
		"ValidatingAdmissionPolicyBinding": 3,
		"FlowSchema":                       2,
	}, kinds(objs))
	for _, u := range objs {
		assert.NotEqual(t, "petri-sync", u.GetNamespace(), key(u))
		assert.NotEqual(t, "petri-sync", u.GetName(), key(u))
	}
	find(t, objs, "Namespace", "", "petri-system")
	find(t, objs, "Namespace", "", "petri-shared")
	find(t, objs, "ServiceAccount", "petri-system", "petri-operator")
	find(t, objs, "ConfigMap", "petri-system", "petri-operator")

	// The operator's RBAC is the one it has in a single cluster.
	management := byKey(render(t, nil))
	for _, k := range []string{
		"ServiceAccount petri-system/petri-operator", "ClusterRole /petri-operator", "ClusterRoleBinding /petri-operator",
		"Role petri-system/petri-operator", "RoleBinding petri-system/petri-operator", "ConfigMap petri-system/petri-operator",
		"ValidatingAdmissionPolicy /petri-operator-jobs", "ValidatingAdmissionPolicy /petri-operator-namespaces",
		"ValidatingAdmissionPolicy /petri-operator-rolebindings", "FlowSchema /petri-controllers",
	} {
		w, g := management[k], byKey(objs)[k]
		require.NotNil(t, w, k)
		require.NotNil(t, g, k)
		assert.Equal(t, w.Object, g.Object, "%s is the management installation's", k)
	}

	// Its settings are the management cluster's, as its fences need.
	cm := find(t, renderWorkload(t, map[string]any{"operator": map[string]any{"stepImages": []any{"registry.example.com/db-tools:"}, "workloadPodSecurity": "restricted"}}),
		"ConfigMap", "petri-system", "petri-operator")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	assert.Equal(t, "registry.example.com/db-tools:", data["step-images"])
	assert.Equal(t, "restricted", data["workload-pod-security"])

	// Options of the management installation add nothing here.
	assert.Equal(t, kinds(objs), kinds(renderWorkload(t, everyOption())))
}

// Without a mode, and with mode management, the chart renders the same
// objects as before the workload mode: the operator, sync and the CRDs.
func TestChartDefaultModeIsManagement(t *testing.T) {
	stacktest.RegisterInputs(t)
	defaults := render(t, nil)
	assert.Equal(t, defaults, render(t, map[string]any{"mode": "management"}))
	find(t, defaults, "Deployment", "petri-system", "petri-operator")
	find(t, defaults, "Deployment", "petri-sync", "petri-sync")
	find(t, defaults, "Namespace", "", "petri-sync")
	assert.Equal(t, 5, kinds(defaults)["CustomResourceDefinition"], "EphemeralEnvironment, SharedWorkload, WorkloadCluster, PullRequestState, Repository")

	_, _, err := stack.RenderChart(map[string]any{"mode": "workloads"}, kubeVersion)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/mode")
}

// The workload mode renders exactly the objects kubectl kustomize
// config/workload builds, once Helm's own labels are set aside.
func TestChartWorkloadModeRendersWhatConfigWorkloadInstalls(t *testing.T) {
	stacktest.RegisterInputs(t)
	built, err := st.Kubectl(context.Background(), "kustomize", filepath.Join(root(t), "config", "workload"))
	require.NoError(t, err)
	want, got := byKey(decode(t, built)), byKey(renderWorkload(t, nil))
	assert.Equal(t, sortedKeys(want), sortedKeys(got), "the workload mode renders the objects of config/workload")
	require.GreaterOrEqual(t, len(want), 16)
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			continue
		}
		normalize(t, w)
		normalize(t, g)
		assert.Equal(t, w.Object, g.Object, "%s: the chart's object differs from config/workload's", k)
	}
}

// The API server accepts every object of the workload mode in a
// server-side dry run.
func TestChartWorkloadModePassesServerDryRun(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	objs := renderWorkload(t, nil)
	var names []string
	for _, u := range objs {
		err := st.Client.Patch(ctx, u, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner("petri-chart-test"))
		assert.NoError(t, err, "server dry run of %s", key(u))
		names = append(names, key(u))
	}
	sort.Strings(names)
	assert.Len(t, names, 16)
}
