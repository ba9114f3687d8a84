package images_test

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/hack/images"
)

// TestOutputs writes an image into an OCI layout and a tarball and pushes
// it, and reads each back by its name with the same digest.
func TestOutputs(t *testing.T) {
	spec, err := images.Lookup("pause")
	require.NoError(t, err)
	img, err := images.Assemble(map[string]images.File{"/pause": {Data: []byte("x"), Mode: 0o755}}, images.Config{Entrypoint: spec.Entrypoint()})
	require.NoError(t, err)
	built := []images.Built{{Spec: spec, Image: img}}
	want, err := img.Digest()
	require.NoError(t, err)
	dir := t.TempDir()

	require.NoError(t, images.WriteLayout(filepath.Join(dir, "layout"), "example.test/petri", "v1", built))
	p, err := layout.FromPath(filepath.Join(dir, "layout"))
	require.NoError(t, err)
	index, err := p.ImageIndex()
	require.NoError(t, err)
	m, err := index.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 1)
	require.Equal(t, want, m.Manifests[0].Digest)
	require.Equal(t, "example.test/petri/pause:v1", m.Manifests[0].Annotations["org.opencontainers.image.ref.name"])

	file := filepath.Join(dir, "images.tar")
	require.NoError(t, images.WriteTarball(file, "example.test/petri", "v1", built))
	tag, err := name.NewTag("example.test/petri/pause:v1")
	require.NoError(t, err)
	fromTar, err := tarball.ImageFromPath(file, &tag)
	require.NoError(t, err)
	cfg, err := fromTar.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, images.User, cfg.Config.User)

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	require.NoError(t, images.Push(context.Background(), host+"/petri", "v1", true, built))
	pushed, err := remote.Head(must(name.NewTag(host+"/petri/pause:v1", name.Insecure)))
	require.NoError(t, err)
	require.Equal(t, want, pushed.Digest)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
