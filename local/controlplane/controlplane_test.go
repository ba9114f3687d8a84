package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
)

// kubernetesVersion is KUBERNETES_VERSION of the Makefile, the version make
// controlplane builds and stamps into the binaries, with its major and minor.
func kubernetesVersion(t *testing.T) (gitVersion, major, minor string) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	require.NoError(t, err)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^KUBERNETES_VERSION\s*:=\s*(v(\d+)\.(\d+)\.\d+)\s*$`).FindSubmatch(makefile)
	require.NotNil(t, m, "KUBERNETES_VERSION in the Makefile")
	return string(m[1]), string(m[2]), string(m[3])
}

// The control plane reports the Kubernetes version it was built from, not
// the v0.0.0-master of an unstamped build: charts check it against their
// kubeVersion and pick API versions from it.
func TestControlPlaneReportsItsKubernetesVersion(t *testing.T) {
	want, wantMajor, wantMinor := kubernetesVersion(t)
	assets, err := controlplane.AssetsDir()
	require.NoError(t, err)
	// go test caches results by the files a test looks at: a rebuilt binary
	// must run this test again.
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		_, err := os.Stat(filepath.Join(assets, b))
		require.NoError(t, err, "run 'make controlplane'")
	}

	// Only what /version needs: no controllers beyond those Start requires.
	c, err := controlplane.Start(controlplane.Options{Controllers: []string{"serviceaccount-controller"}})
	require.NoError(t, err)
	t.Cleanup(c.Stop)

	server, err := c.Clientset.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, want, server.GitVersion)
	assert.Equal(t, wantMajor, server.Major)
	assert.Equal(t, wantMinor, server.Minor)
	assert.NotEmpty(t, server.BuildDate)
	assert.NotEqual(t, "1970-01-01T00:00:00Z", server.BuildDate, "the build date is stamped")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), "version", "-o", "json", "--kubeconfig", c.Kubeconfig)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "kubectl version exits 0; stderr:\n%s", stderr.String())
	var out struct {
		ClientVersion *version.Info `json:"clientVersion"`
		ServerVersion *version.Info `json:"serverVersion"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	require.NotNil(t, out.ClientVersion, stdout.String())
	require.NotNil(t, out.ServerVersion, stdout.String())
	assert.Equal(t, want, out.ClientVersion.GitVersion)
	assert.Equal(t, wantMajor, out.ClientVersion.Major)
	assert.Equal(t, wantMinor, out.ClientVersion.Minor)
	assert.Equal(t, want, out.ServerVersion.GitVersion)
	assert.NotContains(t, stderr.String(), "WARNING", "no version skew between kubectl and the server")
}

// The Services' address range is sized for scale: the API server's default
// ServiceCIDR holds 65,534 addresses, not the 254 of envtest's default, and a
// Service can take an address from its upper part.
func TestServiceRangeFitsThousandsOfEnvironments(t *testing.T) {
	c, err := controlplane.Start(controlplane.Options{Controllers: []string{"serviceaccount-controller"}})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx := context.Background()

	var cidr networkingv1.ServiceCIDR
	require.Eventually(t, func() bool {
		return c.Client.Get(ctx, client.ObjectKey{Name: "kubernetes"}, &cidr) == nil
	}, 30*time.Second, 100*time.Millisecond, "the default ServiceCIDR exists")
	assert.Equal(t, []string{controlplane.ServiceClusterIPRange}, cidr.Spec.CIDRs)

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "high"},
		Spec: corev1.ServiceSpec{
			ClusterIP: "10.0.200.17",
			Ports:     []corev1.ServicePort{{Port: 80}},
		},
	}
	require.NoError(t, c.Client.Create(ctx, svc), "an address beyond the first /24 is allocatable")
}

// A restarted API server keeps every object (same etcd), its address and
// its keys: a client made before the restart and a ServiceAccount token
// minted before it both work after it.
func TestRestartAPIServerKeepsStateAndClients(t *testing.T) {
	c, err := controlplane.Start(controlplane.Options{Controllers: []string{"serviceaccount-controller"}})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx := context.Background()

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept"}, Data: map[string]string{"k": "v"}}
	require.NoError(t, c.Client.Create(ctx, cm))
	require.Eventually(t, func() bool {
		return c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "default"}, &corev1.ServiceAccount{}) == nil
	}, 30*time.Second, 50*time.Millisecond)
	saConfig, err := c.ServiceAccountConfig(ctx, "default", "default")
	require.NoError(t, err)
	saClient, err := client.New(saConfig, client.Options{Scheme: controlplane.Scheme()})
	require.NoError(t, err)
	host := c.Config.Host

	require.NoError(t, c.RestartAPIServer(ctx, 500*time.Millisecond))
	assert.Equal(t, host, c.Config.Host)
	got := &corev1.ConfigMap{}
	require.NoError(t, c.Client.Get(ctx, client.ObjectKeyFromObject(cm), got))
	assert.Equal(t, "v", got.Data["k"])
	assert.Equal(t, cm.UID, got.UID)
	// The token authenticates (and is refused only by RBAC, not as unknown).
	err = saClient.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forbidden", "the ServiceAccount's token still authenticates")

	// Twice in a row works too: the second restart replaces the first one's process.
	require.NoError(t, c.RestartAPIServer(ctx, 0))
	require.NoError(t, c.Client.Get(ctx, client.ObjectKeyFromObject(cm), got))
}
