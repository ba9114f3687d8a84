package realnode

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestImageLayerAndConfig(t *testing.T) {
	files := map[string]File{
		"/app":                {Data: []byte("binary"), Mode: 0o755},
		"/etc/app/config.yml": {Data: []byte("a: 1")},
	}
	data, err := layerTar(files)
	require.NoError(t, err)
	tr := tar.NewReader(bytes.NewReader(data))
	seen := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		for _, parent := range []string{"etc/", "etc/app/"} {
			if h.Name != parent && len(h.Name) > len(parent) && h.Name[:len(parent)] == parent {
				require.Contains(t, seen, parent, "%s comes after its directory", h.Name)
			}
		}
		seen[h.Name] = h
	}
	require.Equal(t, int64(0o755), seen["app"].Mode)
	require.Equal(t, int64(0o644), seen["etc/app/config.yml"].Mode)
	require.Equal(t, int64(0o1777), seen["tmp/"].Mode)
	for _, d := range []string{"dev/", "proc/", "sys/", "etc/", "etc/app/"} {
		require.Equal(t, byte(tar.TypeDir), seen[d].Typeflag, d)
	}

	img, err := Image(files, "/app", "serve")
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
