package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/controllers"
)

// podSecurity is a namespace's enforced level and version, as the API
// server has them.
func podSecurity(t *testing.T, name string) (level, version string) {
	t.Helper()
	ns := &corev1.Namespace{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: name}, ns))
	return ns.Labels[controllers.LabelPodSecurityEnforce], ns.Labels[controllers.LabelPodSecurityEnforceVersion]
}

// relabel sets (or, with "", removes) a namespace's Pod Security level as a
// cluster administrator would.
func relabel(t *testing.T, name, level string) {
	t.Helper()
	value := `"` + level + `"`
	if level == "" {
		value = "null"
	}
	patch := `{"metadata":{"labels":{"` + controllers.LabelPodSecurityEnforce + `":` + value + `}}}`
	require.NoError(t, env.Client.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch))))
}

func podSecurityBack(t *testing.T, name string) {
	t.Helper()
	ok := eventually(60*time.Second, func() bool {
		level, _ := podSecurity(t, name)
		return level == "baseline"
	})
	level, _ := podSecurity(t, name)
	require.True(t, ok, "namespace %s back at baseline, not %q", name, level)
}

// A pod a chart could ask for, privileged or not.
func pod(ns string, privileged bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "petri.dev/example-app:v1",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(privileged)},
		}}},
	}
}

// The environment's namespace enforces the installation's Pod Security
// level (the tests' operator runs with the default, baseline), so the API
// server's Pod Security admission refuses a privileged pod there, whatever
// a chart asks for; a namespace relabelled to another level, or left
// without one, gets it back on the next pass.
func TestWorkloadNamespaceEnforcesThePodSecurityLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("psa", greeter("app"))))
	ns := waitFor(t, "psa", "ready", ready).Status.TargetNamespace
	level, version := podSecurity(t, ns)
	assert.Equal(t, "baseline", level)
	assert.Equal(t, "latest", version)

	err := env.Client.Create(ctx, pod(ns, true), client.DryRunAll)
	require.Error(t, err, "a privileged pod is refused")
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `violates PodSecurity "baseline:latest": privileged`)
	require.NoError(t, env.Client.Create(ctx, pod(ns, false), client.DryRunAll), "an unprivileged one is admitted")

	relabel(t, ns, "privileged")
	podSecurityBack(t, ns)
	relabel(t, ns, "")
	podSecurityBack(t, ns)
}

// The shared namespace enforces the same level once a shared workload is
// deployed there, and gets it back on a shared workload's next pass when
// relabelled (one the installation made is not among the namespaces the
// operator watches).
func TestSharedNamespaceEnforcesThePodSecurityLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw := sharedWorkload("psa-shared", t.TempDir())
	require.NoError(t, env.Client.Create(ctx, sw))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, sw) })
	swReady(t, "psa-shared")
	level, version := podSecurity(t, sharedNS)
	assert.Equal(t, "baseline", level)
	assert.Equal(t, "latest", version)
	err := env.Client.Create(ctx, pod(sharedNS, true), client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "a privileged pod is refused in %s: %v", sharedNS, err)

	relabel(t, sharedNS, "privileged")
	cur := getSW("psa-shared")
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Annotations = map[string]string{"test.petri.dev/poke": testClock.Now().Format(time.RFC3339Nano)}
	require.NoError(t, env.Client.Patch(ctx, cur, patch))
	podSecurityBack(t, sharedNS)
}
