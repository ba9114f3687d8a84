package deployer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
)

// Every object a deploy writes carries its release's label, beside the
// chart's own, and a Deployment the replicas its manifest asked for: what
// the operator's health watch selects and compares by. An upgrade records
// the new count.
func TestDeployLabelsEveryObjectWithItsRelease(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	ch := localChart(t, "greeter")

	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: map[string]any{"replicas": 3}})
	require.NoError(t, err)
	var dep appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &dep))
	assert.Equal(t, "web", dep.Labels[contract.LabelRelease])
	assert.Equal(t, "web", dep.Labels["app.kubernetes.io/instance"], "the chart's own labels stay")
	assert.Equal(t, "3", dep.Annotations[contract.AnnotationReplicas])
	assert.NotContains(t, dep.Spec.Template.Labels, contract.LabelRelease, "the pods are not the release's objects")
	var cm corev1.ConfigMap
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &cm))
	assert.Equal(t, "web", cm.Labels[contract.LabelRelease])
	assert.NotContains(t, cm.Annotations, contract.AnnotationReplicas, "only workloads have replicas")

	_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: map[string]any{"replicas": 2}})
	require.NoError(t, err)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &dep))
	assert.Equal(t, "2", dep.Annotations[contract.AnnotationReplicas])
	assert.Equal(t, int32(2), *dep.Spec.Replicas)
}
