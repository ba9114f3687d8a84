package plugin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

// get names each environment's cluster: the WorkloadCluster the operator
// placed it in, the management cluster, or that its placement is pending;
// the Helm releases of one in a workload cluster are not looked for in
// the management cluster. The environments sit in a namespace the
// operator does not watch, so the test plays the operator's status.
func TestGetShowsTheCluster(t *testing.T) {
	ctx := context.Background()
	const ns = "placed"
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	require.NoError(t, cluster.Client.Create(ctx, namespace))
	t.Cleanup(func() { _ = cluster.Client.Delete(ctx, namespace) })
	placement := &petriv1.Placement{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
	envs := map[string]struct {
		placement *petriv1.Placement
		status    petriv1.EphemeralEnvironmentStatus
		cluster   string
	}{
		"in-east":    {placement, petriv1.EphemeralEnvironmentStatus{TargetNamespace: "in-east-1f", Cluster: "east"}, "east"},
		"waiting":    {placement, petriv1.EphemeralEnvironmentStatus{}, render.ClusterPending},
		"management": {nil, petriv1.EphemeralEnvironmentStatus{TargetNamespace: "management-2a"}, render.ClusterManagement},
	}
	for name, c := range envs {
		e := prEnvironment(name, greeter("web"))
		e.Namespace, e.Spec.Placement = ns, c.placement
		create(t, e)
		e.Status = c.status
		require.NoError(t, cluster.Client.Status().Update(ctx, e))
	}

	out, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "get", "-n", ns)
	require.NoError(t, err, errOut)
	t.Log("\n" + out)
	for _, tree := range strings.Split(out, "\n\n") {
		name, _, _ := strings.Cut(tree, "  ")
		c, ok := envs[name]
		require.True(t, ok, "a tree of an environment of the test: %q", tree)
		assert.Contains(t, strings.Split(tree, "\n"), "├─ cluster       "+c.cluster, name)
	}

	v := getJSON(t, cluster.Kubeconfig, "in-east", "-n", ns)
	assert.Equal(t, "east", v.Cluster)
	assert.Equal(t, "in-east-1f", v.Namespace)
	assert.Contains(t, v.Warnings, "Helm release revisions are in namespace in-east-1f of workload cluster east, which kubectl petri does not read")
	assert.Equal(t, render.ClusterPending, getJSON(t, cluster.Kubeconfig, "waiting", "-n", ns).Cluster)
	m := getJSON(t, cluster.Kubeconfig, "management", "-n", ns)
	assert.Equal(t, render.ClusterManagement, m.Cluster)
	for _, w := range m.Warnings {
		assert.NotContains(t, w, "workload cluster")
	}
}
