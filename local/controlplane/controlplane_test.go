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
