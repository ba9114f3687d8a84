package images

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLayerDirectoriesBeforeFiles(t *testing.T) {
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
		require.Zero(t, h.Uid, h.Name)
		require.Zero(t, h.Gid, h.Name)
		seen[h.Name] = h
	}
	require.Equal(t, int64(0o755), seen["app"].Mode)
	require.Equal(t, int64(0o644), seen["etc/app/config.yml"].Mode)
	require.Equal(t, int64(0o1777), seen["tmp/"].Mode)
	for _, d := range []string{"dev/", "proc/", "sys/", "etc/", "etc/app/"} {
		require.Equal(t, byte(tar.TypeDir), seen[d].Typeflag, d)
	}

	again, err := layerTar(files)
	require.NoError(t, err)
	require.Equal(t, data, again, "the same files make the same layer")
}
