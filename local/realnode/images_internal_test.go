package realnode

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestImageConfig(t *testing.T) {
	img, err := Image(map[string]File{"/app": {Data: []byte("binary"), Mode: 0o755}}, "/app", "serve")
	require.NoError(t, err)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "65532:65532", cfg.Config.User)
	require.Equal(t, []string{"/app", "serve"}, cfg.Config.Entrypoint)
	require.Equal(t, "linux", cfg.OS)
	require.Equal(t, "amd64", cfg.Architecture)
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
}

func TestFlagValueAndMarkers(t *testing.T) {
	cmdline := "/bin/kube-apiserver --bind-address=10.250.0.1 --cert-dir=/tmp/k8s_test_framework_1 --etcd-servers=http://127.0.0.1:2379 "
	require.Equal(t, "/tmp/k8s_test_framework_1", flagValue(cmdline, "--cert-dir"))
	require.Equal(t, "http://127.0.0.1:2379", flagValue(cmdline, "--etcd-servers"))
	require.Empty(t, flagValue(cmdline, "--advertise-address"))

	p := proc{cmdline: "containerd-shim-runc-v2 -address /tmp/petri-rn-0123abcd/containerd/containerd.sock ", cgroup: "4:memory:/\n"}
	require.True(t, p.of("/tmp/petri-rn-0123abcd", "petri-rn-0123abcd"))
	require.False(t, p.of("/tmp/petri-rn-ffffffff", "petri-rn-ffffffff"))
	container := proc{cmdline: "/testapp serve /data ", cgroup: "4:memory:/petri-rn-0123abcd/kubepods/besteffort/pod1/abc\n"}
	require.True(t, container.of("", "petri-rn-0123abcd"), "a container is the run's by its cgroup")
	require.Equal(t, []string{"petri-rn-0123abcd"}, markerRE.FindAllString(container.cgroup, -1))
}
