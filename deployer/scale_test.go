package deployer_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/deployer"
)

func podTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "petri.dev/nowhere:1"}}},
	}
}

func createDeployment(t *testing.T, ns, name string, replicas *int32) {
	t.Helper()
	require.NoError(t, env.Client.Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name),
		},
	}))
}

func createStatefulSet(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	require.NoError(t, env.Client.Create(context.Background(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name),
		},
	}))
}

// workloads reads every Deployment's and StatefulSet's replicas and its
// recorded count ("-" when it has none).
func workloads(t *testing.T, ns string) map[string][2]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][2]string{}
	var ds appsv1.DeploymentList
	require.NoError(t, env.Client.List(ctx, &ds, client.InNamespace(ns)))
	for _, d := range ds.Items {
		out["Deployment/"+d.Name] = [2]string{itoa(*d.Spec.Replicas), recorded(d.Annotations)}
	}
	var ss appsv1.StatefulSetList
	require.NoError(t, env.Client.List(ctx, &ss, client.InNamespace(ns)))
	for _, s := range ss.Items {
		out["StatefulSet/"+s.Name] = [2]string{itoa(*s.Spec.Replicas), recorded(s.Annotations)}
	}
	return out
}

func recorded(a map[string]string) string {
	if v, ok := a[contract.AnnotationReplicasBeforeSleep]; ok {
		return v
	}
	return "-"
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// Sleep scales every Deployment and StatefulSet to zero and records its
// count; Wake restores exactly those counts and removes the record. Both can
// run again without changing anything, and a workload at zero before the
// sleep stays at zero.
func TestSleepAndWakeRestoreTheReplicasExactly(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	createDeployment(t, ns, "web", ptr.To(int32(3)))
	createDeployment(t, ns, "worker", nil) // defaulted to 1
	createDeployment(t, ns, "off", ptr.To(int32(0)))
	createStatefulSet(t, ns, "db", 2)
	awake := map[string][2]string{
		"Deployment/web": {"3", "-"}, "Deployment/worker": {"1", "-"}, "Deployment/off": {"0", "-"}, "StatefulSet/db": {"2", "-"},
	}
	require.Equal(t, awake, workloads(t, ns))

	scaled, err := deployer.Sleep(ctx, env.Clientset, ns)
	require.NoError(t, err)
	assert.Equal(t, []deployer.Scaled{
		{Kind: "Deployment", Name: "web", From: 3, To: 0},
		{Kind: "Deployment", Name: "worker", From: 1, To: 0},
		{Kind: "StatefulSet", Name: "db", From: 2, To: 0},
	}, scaled)
	asleep := map[string][2]string{
		"Deployment/web": {"0", "3"}, "Deployment/worker": {"0", "1"}, "Deployment/off": {"0", "-"}, "StatefulSet/db": {"0", "2"},
	}
	assert.Equal(t, asleep, workloads(t, ns))

	// Again: nothing to do, the first record stays.
	scaled, err = deployer.Sleep(ctx, env.Clientset, ns)
	require.NoError(t, err)
	assert.Empty(t, scaled)
	assert.Equal(t, asleep, workloads(t, ns))

	// Someone scaled web up while asleep: a sleep scales it down again and
	// keeps the count recorded first.
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	require.NoError(t, env.Client.Patch(ctx, web, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":5}}`))))
	scaled, err = deployer.Sleep(ctx, env.Clientset, ns)
	require.NoError(t, err)
	assert.Equal(t, []deployer.Scaled{{Kind: "Deployment", Name: "web", From: 5, To: 0}}, scaled)
	assert.Equal(t, asleep, workloads(t, ns))

	scaled, err = deployer.Wake(ctx, env.Clientset, ns, deployer.WakeOptions{})
	require.NoError(t, err)
	assert.Equal(t, []deployer.Scaled{
		{Kind: "Deployment", Name: "web", From: 0, To: 3},
		{Kind: "Deployment", Name: "worker", From: 0, To: 1},
		{Kind: "StatefulSet", Name: "db", From: 0, To: 2},
	}, scaled)
	assert.Equal(t, awake, workloads(t, ns))

	scaled, err = deployer.Wake(ctx, env.Clientset, ns, deployer.WakeOptions{})
	require.NoError(t, err)
	assert.Empty(t, scaled, "a second wake changes nothing")
	assert.Equal(t, awake, workloads(t, ns))

	// The deployer's writes are its own in the objects' managed fields.
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(web), web))
	var managers []string
	for _, f := range web.ManagedFields {
		managers = append(managers, f.Manager)
	}
	assert.Contains(t, managers, deployer.FieldManager)
}

// A record that is not a replica count is left for a person and named in
// the error; the other workloads wake all the same.
func TestWakeNamesABrokenRecordAndWakesTheRest(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	createDeployment(t, ns, "good", ptr.To(int32(2)))
	createDeployment(t, ns, "broken", ptr.To(int32(1)))
	_, err := deployer.Sleep(ctx, env.Clientset, ns)
	require.NoError(t, err)
	broken := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}}
	require.NoError(t, env.Client.Patch(ctx, broken, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+contract.AnnotationReplicasBeforeSleep+`":"many"}}}`))))

	scaled, err := deployer.Wake(ctx, env.Clientset, ns, deployer.WakeOptions{})
	require.Error(t, err)
	assert.Equal(t, "Deployment "+ns+"/broken: annotation petri.dev/replicas-before-sleep is \"many\", not a replica count; set the replicas by hand and remove it", err.Error())
	assert.Equal(t, []deployer.Scaled{{Kind: "Deployment", Name: "good", From: 0, To: 2}}, scaled)
	assert.Equal(t, map[string][2]string{"Deployment/good": {"2", "-"}, "Deployment/broken": {"0", "many"}}, workloads(t, ns))
}

// With Wait, Wake reports a workload that does not become ready in time as
// a timeout that names it (no node runs these pods).
func TestWakeWaitsForTheWorkloadsToBeReady(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	createDeployment(t, ns, "web", ptr.To(int32(1)))
	_, err := deployer.Sleep(ctx, env.Clientset, ns)
	require.NoError(t, err)

	start := time.Now()
	scaled, err := deployer.Wake(ctx, env.Clientset, ns, deployer.WakeOptions{Wait: true, Timeout: 2 * time.Second})
	require.Error(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second, "it waited")
	assert.Equal(t, contract.ReasonTimeout, deployer.Classify(err))
	assert.Contains(t, err.Error(), "workloads not ready within 2s: Deployment web (0 of 1 available)")
	assert.Equal(t, []deployer.Scaled{{Kind: "Deployment", Name: "web", From: 0, To: 1}}, scaled, "restored before the wait")

	// Nothing to wait for in a namespace whose workloads are all at zero.
	empty := namespace(t)
	createDeployment(t, empty, "off", ptr.To(int32(0)))
	_, err = deployer.Wake(ctx, env.Clientset, empty, deployer.WakeOptions{Wait: true, Timeout: 5 * time.Second})
	require.NoError(t, err)
}
