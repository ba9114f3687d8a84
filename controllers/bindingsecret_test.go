package controllers_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
)

// withOwnPassword gives a shared workload a key generated for each binding
// (an environment's own password) beside its instance key.
func withOwnPassword(sw *petriv1.SharedWorkload) *petriv1.SharedWorkload {
	sw.Spec.BindingSecret = &petriv1.BindingSecretSpec{Keys: []string{"DB_PASSWORD"}, Length: 20}
	return sw
}

// requireNoInstanceKey fails when any Secret of namespace ns holds a key of
// the instance Secret, by name or by value.
func requireNoInstanceKey(t *testing.T, ns string, instance *corev1.Secret) {
	t.Helper()
	var secrets corev1.SecretList
	require.NoError(t, env.Client.List(context.Background(), &secrets, client.InNamespace(ns)))
	require.NotEmpty(t, secrets.Items)
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			for ik, iv := range instance.Data {
				assert.NotEqual(t, ik, k, "Secret %s/%s holds the instance key %s", ns, s.Name, ik)
				assert.False(t, strings.Contains(string(v), string(iv)), "Secret %s/%s key %s holds the value of the instance key %s", ns, s.Name, k, ik)
			}
		}
	}
}

// stepJob is the one Job of an environment's binding step.
func stepJob(t *testing.T, e *petriv1.EphemeralEnvironment, action string) *batchv1.Job {
	t.Helper()
	jobs := stepJobs(t, e.UID, action)
	require.Len(t, jobs, 1, "%s Jobs of %s", action, e.Name)
	return &jobs[0]
}

// A binding carries only the environment's own credentials: no Secret of
// the environment's namespace holds an instance key, by name or by value;
// the bind Job is given the staged binding alone; the provision and
// deprovision Jobs get the instance keys from the instance Secret (in their
// environment and as files) beside the binding. The key generated for the
// binding is the environment's own and the same for all three.
func TestBindingCarriesOnlyTheEnvironmentsOwnCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := recordDir(t)
	require.NoError(t, env.Client.Create(ctx, withOwnPassword(sharedWorkload("own-sw", dir))))
	require.NoError(t, env.Client.Create(ctx, boundEnv("own-a", "own-sw")))
	require.NoError(t, env.Client.Create(ctx, boundEnv("own-b", "own-sw")))
	a := waitFor(t, "own-a", "ready", ready)
	b := waitFor(t, "own-b", "ready", ready)
	instance := instanceSecret(t, "own-sw")
	require.NotEmpty(t, instance.Data["ADMIN_PASSWORD"])

	// The workload namespaces: the binding, and no instance key anywhere.
	bindings := map[string]*corev1.Secret{}
	for _, e := range []*petriv1.EphemeralEnvironment{a, b} {
		requireNoInstanceKey(t, e.Status.TargetNamespace, instance)
		s := &corev1.Secret{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: e.Status.TargetNamespace, Name: "petri-binding-own-sw"}, s))
		assert.ElementsMatch(t, []string{"DATABASE", "HOST", "ENV_NAME", "DB_PASSWORD"}, keysOf(s.Data))
		assert.Len(t, s.Data["DB_PASSWORD"], 20)
		bindings[e.Name] = s
	}
	assert.NotEqual(t, bindings["own-a"].Data["DB_PASSWORD"], bindings["own-b"].Data["DB_PASSWORD"], "each binding has a password of its own")

	// The bind Job copies the staged binding, which holds no instance key;
	// it mounts nothing else.
	bind := stepJob(t, a, contract.ActionBind)
	for _, v := range bind.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			assert.NotEqual(t, "own-sw-instance", v.Secret.SecretName, "the bind Job mounts the instance Secret")
		}
	}
	staged := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: controllers.BindingStaging(a, "own-sw")}, staged))
	assert.Equal(t, bindings["own-a"].Data, staged.Data, "the binding is the staged Secret's copy")

	// The provision Job: the instance Secret in its environment and mounted,
	// the binding after it.
	pod := stepJob(t, a, contract.ActionProvision).Spec.Template.Spec
	var envFrom []string
	for _, f := range pod.Containers[0].EnvFrom {
		require.NotNil(t, f.SecretRef)
		envFrom = append(envFrom, f.SecretRef.Name)
	}
	assert.Equal(t, []string{"own-sw-instance", staged.Name}, envFrom)
	mounted := map[string]string{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			mounted[v.Name] = v.Secret.SecretName
		}
	}
	assert.Equal(t, "own-sw-instance", mounted["instance"])
	assert.Equal(t, staged.Name, mounted["values"])

	// What the steps saw: the instance key and the binding's own password,
	// the same at deprovision as at provision.
	prov := readRecord(t, filepath.Join(dir, "own-a-provision.env"))
	assert.Equal(t, string(instance.Data["ADMIN_PASSWORD"]), prov["ADMIN_PASSWORD"], "the provision step has the instance key")
	assert.Equal(t, string(bindings["own-a"].Data["DB_PASSWORD"]), prov["DB_PASSWORD"], "and the binding's own password")
	require.NoError(t, env.Client.Delete(ctx, a))
	waitGone(t, a)
	deprov := readRecord(t, filepath.Join(dir, "own-a-deprovision.env"))
	for _, k := range []string{"ADMIN_PASSWORD", "DB_PASSWORD", "DATABASE"} {
		assert.Equal(t, prov[k], deprov[k], "the deprovision step saw the %s the provision step saw", k)
	}
	assert.Equal(t, string(instance.Data["ADMIN_PASSWORD"]), deprov["ADMIN_PASSWORD"], "the deprovision step has the instance key")
}

func keysOf(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A binding staged by an earlier version holds the instance keys, in its
// staged Secret and in its copy in the workload namespace. Bound again (here:
// the shared workload listed after the earlier binding's Secrets were left
// behind), it is staged again without them, keeping the values it had, and
// the bind Job writes the copy again: no instance key is left in the
// namespace, the binding gets its own password, and provision still has the
// instance keys.
func TestBindingStagedWithInstanceKeysIsStagedAgainWithout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := recordDir(t)
	require.NoError(t, env.Client.Create(ctx, withOwnPassword(sharedWorkload("legacy-sw", dir))))
	swReady(t, "legacy-sw")
	instance := instanceSecret(t, "legacy-sw")
	require.NoError(t, env.Client.Create(ctx, newEnv("legacy", greeter("app"))))
	e := waitFor(t, "legacy", "ready", ready)

	old := map[string][]byte{"DATABASE": []byte("db_kept"), "HOST": []byte("legacy-sw." + sharedNS + ".svc"), "ENV_NAME": []byte("legacy")}
	for k, v := range instance.Data {
		old[k] = v
	}
	staged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: controllers.BindingStaging(e, "legacy-sw"),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(e, petriv1.GroupVersion.WithKind("EphemeralEnvironment"))}},
		Immutable: new(true),
		Data:      old,
	}
	require.NoError(t, env.Client.Create(ctx, staged))
	require.NoError(t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.Status.TargetNamespace, Name: "petri-binding-legacy-sw"},
		Data:       old,
	}))

	e.Spec.SharedWorkloads = []string{"legacy-sw"}
	e.Spec.Components[0].Uses = []string{"legacy-sw"}
	require.NoError(t, env.Client.Update(ctx, e))
	e = waitFor(t, "legacy", "ready and bound", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && conditionIs(e, petriv1.ConditionSharedWorkloadsBound, metav1.ConditionTrue, petriv1.ReasonBindSucceeded)
	})

	requireNoInstanceKey(t, e.Status.TargetNamespace, instance)
	binding := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: e.Status.TargetNamespace, Name: "petri-binding-legacy-sw"}, binding))
	assert.ElementsMatch(t, []string{"DATABASE", "HOST", "ENV_NAME", "DB_PASSWORD"}, keysOf(binding.Data))
	assert.Equal(t, "db_kept", string(binding.Data["DATABASE"]), "a staged value is kept")
	restaged := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(staged), restaged))
	assert.NotEqual(t, staged.UID, restaged.UID, "staged again")
	assert.Equal(t, binding.Data, restaged.Data)

	prov := readRecord(t, filepath.Join(dir, "legacy-provision.env"))
	assert.Equal(t, string(instance.Data["ADMIN_PASSWORD"]), prov["ADMIN_PASSWORD"])
	assert.Equal(t, string(binding.Data["DB_PASSWORD"]), prov["DB_PASSWORD"])
	assert.Equal(t, "db_kept", prov["DATABASE"])
}
