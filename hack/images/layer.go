package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one file of an image.
type File struct {
	// Source is the file on this machine; Data is used when it is empty.
	Source string
	Data   []byte
	// Mode is the file's permission bits; 0644 when zero.
	Mode int64
}

// Config is what an image's configuration says beside its layer.
type Config struct {
	Entrypoint []string
	// Env is the environment beyond PATH=/.
	Env    []string
	Labels map[string]string
}

// Assemble builds a single-layer linux/amd64 OCI image of files (path in the
// image to file) on an empty base, run as User: no shell, no package
// manager, only what the files are. The layer also has the directories
// every container expects (/tmp, world-writable and sticky; /etc, /dev,
// /proc, /sys, which the runtime mounts over) and the files' parents, all
// owned by root.
func Assemble(files map[string]File, c Config) (v1.Image, error) {
	data, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = c.Entrypoint
	cfg.Config.User = User
	cfg.Config.Env = append([]string{"PATH=/"}, c.Env...)
	cfg.Config.Labels = c.Labels
	return mutate.ConfigFile(img, cfg)
}

// layerTar is the layer of files: the directories first, parents before
// their children, then each file, all owned by root with zero times, so the
// same files give the same layer.
func layerTar(files map[string]File) ([]byte, error) {
	dirs := map[string]bool{"tmp": true, "etc": true, "dev": true, "proc": true, "sys": true}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
		for d := filepath.Dir(strings.TrimPrefix(filepath.Clean(p), "/")); d != "." && d != "/"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	sort.Strings(paths)
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range dirList {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: mode, Typeflag: tar.TypeDir}); err != nil {
			return nil, err
		}
	}
	for _, p := range paths {
		if err := writeFile(tw, p, files[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, p string, f File) error {
	data := f.Data
	if f.Source != "" {
		var err error
		if data, err = os.ReadFile(f.Source); err != nil {
			return fmt.Errorf("image file %s: %w", p, err)
		}
	}
	if f.Mode == 0 {
		f.Mode = 0o644
	}
	rel := strings.TrimPrefix(filepath.Clean(p), "/")
	if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: f.Mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// treeFiles are the regular files under dir on this machine as files under
// at in the image, their permission bits kept.
func treeFiles(at, dir string, into map[string]File) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s: only regular files go into an image", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		into[imagePath(at, rel)] = File{Source: p, Mode: int64(info.Mode().Perm())}
		return nil
	})
}

func imagePath(at, rel string) string {
	return filepath.ToSlash(filepath.Join(at, rel))
}
