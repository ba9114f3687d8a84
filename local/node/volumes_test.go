package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/node"
)

func TestServiceAccountWithoutPermissionsIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}))
	j := job(ns, "denied", "create-configmap", "--termination-log=/dev/termination-log", ns, "should-not-exist")
	j.Spec.Template.Spec.ServiceAccountName = "nobody"
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "denied")() == batchv1.JobFailed }, 30*time.Second, 50*time.Millisecond)
	msg := jobPods(ns, "denied")[0].Status.ContainerStatuses[0].State.Terminated.Message
	assert.Contains(t, msg, "forbidden")
	assert.Contains(t, msg, "system:serviceaccount:"+ns+":nobody", "the API server saw the pod's ServiceAccount")

	// The same pod identity with a RoleBinding succeeds: the refusal came from
	// RBAC, not from a broken token.
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "nobody", Namespace: ns}},
	}))
	j = job(ns, "allowed", "create-configmap", ns, "created-by-pod")
	j.Spec.Template.Spec.ServiceAccountName = "nobody"
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "allowed")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	var cm corev1.ConfigMap
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "created-by-pod"}, &cm))
}

func TestSecretVolumeAndEnvAreMaterialised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"},
		Data:       map[string][]byte{"password": []byte("s3cret"), "values.yaml": []byte("a: 1\n")},
	}))
	// The container mounts /tmp, so the file it writes for the test lives
	// outside /tmp.
	out := outsideTmp(t, "env")
	j := job(ns, "record", "record", out)
	c := &j.Spec.Template.Spec.Containers[0]
	c.Env = []corev1.EnvVar{
		{Name: "VALUES", Value: "/etc/values/values.yaml"},
		{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "GREETING", Value: "hello $(POD_NAMESPACE)"},
	}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "values", MountPath: "/etc/values"}, {Name: "tmp", MountPath: "/tmp"}}
	j.Spec.Template.Spec.Volumes = []corev1.Volume{
		{Name: "values", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "record")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)

	data, err := os.ReadFile(out)
	require.NoError(t, err)
	vars := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	assert.Equal(t, "s3cret", vars["PASSWORD"])
	assert.Equal(t, ns, vars["POD_NAMESPACE"])
	assert.Equal(t, "hello "+ns, vars["GREETING"])
	require.NotEqual(t, "/etc/values/values.yaml", vars["VALUES"], "a path under a mount is rewritten to the local copy")
	values, err := os.ReadFile(vars["VALUES"])
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(values))
	// The node's own paths are never rewritten, even where they lie under a
	// directory the container mounts (/tmp here).
	_, err = os.Stat(vars["KUBECONFIG"])
	assert.NoError(t, err, "KUBECONFIG %q points at the pod's kubeconfig", vars["KUBECONFIG"])
}

// Paths under a directory the image carries are rewritten to the local copy
// of those files; a mount over part of it wins.
func TestImageFilesAreMapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	const image = "petri.dev/testhelper-files"
	charts := t.TempDir()
	node, err := node.New(env.Config, node.Options{
		Name: "files-node", Images: map[string]string{image: helper}, Dir: filepath.Join(scratch, ns),
		ImageFiles: map[string]map[string]string{image: {"/charts": charts}},
	})
	require.NoError(t, err)
	nctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- node.Run(nctx) }()
	defer func() { cancel(); <-done }()

	out := outsideTmp(t, "env")
	j := job(ns, "files", "record", out)
	c := &j.Spec.Template.Spec.Containers[0]
	c.Image = image + ":v1"
	c.Env = []corev1.EnvVar{{Name: "CHART", Value: "/charts/web"}, {Name: "OTHER", Value: "/chartsx"}, {Name: "LISTEN", Value: ":9090"}}
	require.NoError(t, env.Client.Create(ctx, j))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "files")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), "CHART="+filepath.Join(charts, "web")+"\n")
	assert.Contains(t, string(data), "OTHER=/chartsx\n", "only whole path elements are rewritten")
	assert.Contains(t, string(data), "LISTEN=:9090\n", "an address on an undeclared port is left alone")
}

// outsideTmp returns the path of a file named name in a directory of its
// own outside /tmp (which a test's container may mount over), removed when
// the test ends.
func outsideTmp(t *testing.T, name string) string {
	t.Helper()
	cacheDir, err := os.UserCacheDir()
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(cacheDir, 0o755))
	outDir, err := os.MkdirTemp(cacheDir, "petri-localnode-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(outDir) })
	return filepath.Join(outDir, name)
}

// A volume whose ConfigMap does not exist yet is mounted once it does, as
// the kubelet keeps trying: the pod waits instead of failing (a new
// namespace's kube-root-ca.crt comes a moment after the namespace).
func TestVolumeWaitsForItsConfigMap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	j := job(ns, "waits", "wait-file", "/etc/settings/greeting")
	c := &j.Spec.Template.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}}
	j.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "settings", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}},
	}}}
	require.NoError(t, env.Client.Create(ctx, j))
	// The node has tried to mount the volume, and says why the pod waits.
	require.Eventually(t, func() bool {
		pods := jobPods(ns, "waits")
		if len(pods) != 1 || len(pods[0].Status.ContainerStatuses) == 0 {
			return false
		}
		w := pods[0].Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ContainerCreating" && strings.Contains(w.Message, `configmap "later"`)
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"},
		Data:       map[string]string{"greeting": "hello"},
	}))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "waits")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond,
		"the pod ran once its ConfigMap existed")
}
