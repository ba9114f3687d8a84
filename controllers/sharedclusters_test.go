package controllers_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/local/controlplane"
)

// A shared workload used by an environment of a workload cluster is
// deployed in that cluster too, by a copy of its own (<name>.<cluster>):
// its release (under the shared workload's name), instance keys and Jobs
// are there, as that cluster's API server answers, and the environment's
// binding is made there from them. Deleting the shared workload deletes
// the copy, which undeploys its release there and leaves nothing of it.
func TestSharedWorkloadIsDeployedInTheClusterOfItsUsers(t *testing.T) {
	t.Parallel()
	wl := workloadCluster(t)
	register(t, "south", wl.Config.Host, 10, nil)
	ctx := context.Background()
	dir := recordDir(t)
	original := sharedWorkload("regional", dir)
	require.NoError(t, env.Client.Create(ctx, original))
	swReady(t, "regional")
	e := boundEnv("far", "regional")
	e.Spec.Placement = &petriv1.Placement{Cluster: "south"}
	require.NoError(t, env.Client.Create(ctx, e))
	e = waitFor(t, "far", "Ready in south, bound", ready)
	assert.Equal(t, "south", e.Status.Cluster)
	assert.True(t, conditionIs(e, petriv1.ConditionSharedWorkloadsBound, metav1.ConditionTrue, petriv1.ReasonBindSucceeded))

	cp := swReady(t, "regional.south")
	assert.Equal(t, "south", cp.Status.Cluster)
	assert.True(t, metav1.IsControlledBy(cp, swReady(t, "regional")), "the copy is controlled by the shared workload it copies")
	assert.Equal(t, []string{"south"}, swReady(t, "regional").Status.Clusters)
	assert.Equal(t, int32(1), cp.Status.BoundEnvironments)

	// Its release is in south's shared namespace, named as the original's.
	assert.True(t, releaseStored(t, wl, "regional"), "the release regional is stored in south")
	remoteInstance := &corev1.Secret{}
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: "regional-instance"}, remoteInstance))
	assert.Equal(t, string(cp.UID), remoteInstance.Labels[controllers.LabelSharedWorkloadUID])
	assert.Empty(t, remoteInstance.OwnerReferences, "no owner reference can point across clusters")
	assert.NotEqual(t, instanceSecret(t, "regional").Data["ADMIN_PASSWORD"], remoteInstance.Data["ADMIN_PASSWORD"], "each cluster's instance has keys of its own")
	assert.NotEmpty(t, copyJobs(t, wl, cp), "the copy's Jobs run in south")
	assert.Empty(t, copyJobs(t, env, cp), "and none in the management cluster")

	// The binding is made in south, and its provision step has south's
	// instance keys; the binding itself holds none.
	bs := &corev1.Secret{}
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Namespace: e.Status.TargetNamespace, Name: "petri-binding-regional"}, bs))
	assert.NotContains(t, bs.Data, "ADMIN_PASSWORD")
	assert.Equal(t, "regional."+sharedNS+".svc", string(bs.Data["HOST"]))
	prov := readRecord(t, filepath.Join(dir, "far-provision.env"))
	assert.Equal(t, string(remoteInstance.Data["ADMIN_PASSWORD"]), prov["ADMIN_PASSWORD"], "the provision step saw south's keys")

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	deprov := readRecord(t, filepath.Join(dir, "far-deprovision.env"))
	for _, k := range []string{"ADMIN_PASSWORD", "DATABASE", "HOST", "ENV_NAME"} {
		assert.Equal(t, prov[k], deprov[k], "the deprovision step saw the %s the provision step saw", k)
	}

	require.NoError(t, env.Client.Delete(ctx, original))
	waitGone(t, cp)
	waitGone(t, original)
	assert.False(t, releaseStored(t, wl, "regional"), "the release is undeployed from south")
	assert.Empty(t, copyJobs(t, wl, cp), "the copy's Jobs are deleted there")
	var secrets corev1.SecretList
	require.NoError(t, wl.Client.List(ctx, &secrets, client.InNamespace(mgmtNS), client.MatchingLabels{controllers.LabelSharedWorkloadUID: string(cp.UID)}))
	assert.Empty(t, secrets.Items, "and its Secrets")
}

// releaseStored reports whether Helm's record of the release is in the
// shared namespace of cluster c.
func releaseStored(t *testing.T, c *controlplane.Cluster, release string) bool {
	t.Helper()
	var list corev1.SecretList
	require.NoError(t, c.Client.List(context.Background(), &list, client.InNamespace(sharedNS), client.MatchingLabels{"owner": "helm", "name": release}))
	return len(list.Items) > 0
}

// copyJobs are the Jobs in cluster c of a shared workload's copy.
func copyJobs(t *testing.T, c *controlplane.Cluster, sw *petriv1.SharedWorkload) []batchv1.Job {
	t.Helper()
	var list batchv1.JobList
	require.NoError(t, c.Client.List(context.Background(), &list, client.InNamespace(mgmtNS), client.MatchingLabels{controllers.LabelSharedWorkloadUID: string(sw.UID)}))
	return list.Items
}
