package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of an image built by Image.
type File struct {
	// Source is the file on this machine; Data is used when it is empty.
	Source string
	Data   []byte
	Mode   int64
}

// Image builds a single-layer linux/amd64 image from files (path in the
// image to the file) with the given entrypoint, run as user 65532 and
// without a shell: what a static Go program needs to run as a container.
func Image(files map[string]File, entrypoint ...string) (v1.Image, error) {
	data, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.User = "65532:65532"
	cfg.Config.Env = []string{"PATH=/"}
	return mutate.ConfigFile(img, cfg)
}

// layerTar is the layer of files: each file, then the directories every
// container expects (the runtime mounts over some) and the files' parents,
// all owned by root.
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
	sort.Strings(dirList) // parents before their children
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
		f := files[p]
		data := f.Data
		if f.Source != "" {
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				return nil, fmt.Errorf("image file %s: %w", p, err)
			}
		}
		if f.Mode == 0 {
			f.Mode = 0o644
		}
		rel := strings.TrimPrefix(filepath.Clean(p), "/")
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: f.Mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// LoadImage makes img available to the node's pods as ref (a tagged name
// such as petri.local/app:v1; pods use imagePullPolicy IfNotPresent or
// Never): it is imported into containerd's k8s.io namespace, where kubelet
// finds it without a pull.
func (n *Node) LoadImage(ctx context.Context, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %s: %w", ref, err)
	}
	f, err := os.CreateTemp(filepath.Join(n.Dir, "images"), "image-*.tar")
	if err != nil {
		return err
	}
	path := f.Name()
	_ = f.Close()
	defer func() { _ = os.Remove(path) }()
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("write image %s: %w", ref, err)
	}
	if err := n.ctr(ctx, "images", "import", "--snapshotter", snapshotter, path); err != nil {
		return fmt.Errorf("import image %s: %w", ref, err)
	}
	return nil
}

// ctr runs containerd's client against the node's containerd.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	full := append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)
	out, err := command(ctx, ctrPath, full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
