package images_test

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/hack/images"
)

// TestRecipe builds every image and checks what the recipe promises: a
// static binary as the only entrypoint, user 65532:65532, no shell or
// anything else beside the binary, CA certificates and the deployer's
// charts, and the labels.
func TestRecipe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	built, err := images.Build(ctx, images.Specs, images.Options{Root: "../..", Version: "v0.0.0-test"})
	require.NoError(t, err)
	t.Logf("built %d images in %s", len(built), time.Since(start).Round(time.Millisecond))
	require.Equal(t, []string{"petri-operator", "petri-sync", "petri-deployer", "example-app", "pause"}, images.Names())

	for _, b := range built {
		t.Run(b.Spec.Name, func(t *testing.T) {
			cfg, err := b.Image.ConfigFile()
			require.NoError(t, err)
			require.Equal(t, "65532:65532", cfg.Config.User)
			require.Equal(t, []string{b.Spec.Binary}, cfg.Config.Entrypoint)
			require.Empty(t, cfg.Config.Cmd)
			require.Equal(t, "linux", cfg.OS)
			require.Equal(t, "amd64", cfg.Architecture)
			require.Equal(t, append([]string{"PATH=/"}, b.Spec.Env...), cfg.Config.Env)
			require.Equal(t, "v0.0.0-test", cfg.Config.Labels["org.opencontainers.image.version"])
			require.Equal(t, images.Source, cfg.Config.Labels["org.opencontainers.image.source"])

			files := imageFiles(t, b)
			require.Contains(t, files, strings.TrimPrefix(b.Spec.Binary, "/"))
			requireStatic(t, files[strings.TrimPrefix(b.Spec.Binary, "/")])
			_, hasCA := files["etc/ssl/certs/ca-certificates.crt"]
			require.Equal(t, b.Spec.CACerts, hasCA, "CA certificates")
			for p := range files {
				require.NotContains(t, []string{"sh", "bash", "ash", "dash", "busybox"}, path.Base(p), "a shell at %s", p)
				switch {
				case p == strings.TrimPrefix(b.Spec.Binary, "/"), p == "etc/ssl/certs/ca-certificates.crt":
				case b.Spec.Name == "petri-deployer" && strings.HasPrefix(p, "charts/"):
				default:
					t.Errorf("unexpected file %s", p)
				}
			}
			if b.Spec.Name == "petri-deployer" {
				require.Contains(t, files, "charts/example-app/Chart.yaml", "the example charts under /charts")
				require.Contains(t, cfg.Config.Env, "HOME=/tmp")
			}
		})
	}
}

// imageFiles are the regular files of the image's layers and their
// contents.
func imageFiles(t *testing.T, b images.Built) map[string][]byte {
	t.Helper()
	layers, err := b.Image.Layers()
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			require.Zero(t, h.Uid, "%s owned by root", h.Name)
			if h.Typeflag != tar.TypeReg {
				require.Equal(t, byte(tar.TypeDir), h.Typeflag, "%s: only files and directories", h.Name)
				continue
			}
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[h.Name] = data
		}
		require.NoError(t, rc.Close())
	}
	return files
}

// requireStatic fails unless data is an ELF executable without an
// interpreter or shared libraries.
func requireStatic(t *testing.T, data []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err)
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "a dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
}

func TestOCIMediaTypes(t *testing.T) {
	img, err := images.Assemble(map[string]images.File{"/app": {Data: []byte("x"), Mode: 0o755}}, images.Config{Entrypoint: []string{"/app"}})
	require.NoError(t, err)
	m, err := img.Manifest()
	require.NoError(t, err)
	require.Equal(t, types.OCIManifestSchema1, m.MediaType)
	require.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	require.Len(t, m.Layers, 1)
	require.Equal(t, types.OCILayer, m.Layers[0].MediaType)
}
