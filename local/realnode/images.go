package realnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/petri-dev/petri/hack/images"
)

// File is one file of an image built by Image.
type File = images.File

// Image builds a single-layer linux/amd64 image from files (path in the
// image to the file) with the given entrypoint, run as user 65532 and
// without a shell: what a static Go program needs to run as a container.
// It assembles the image as Petri's own images are (hack/images).
func Image(files map[string]File, entrypoint ...string) (v1.Image, error) {
	return images.Assemble(files, images.Config{Entrypoint: entrypoint})
}

// pauseImage is the recipe's pause image (hack/images) of the petri-pause
// binary make node built from the same package.
func (n *Node) pauseImage() (v1.Image, error) {
	spec, err := images.Lookup("pause")
	if err != nil {
		return nil, err
	}
	return spec.Image(filepath.Join(n.bin, "petri-pause"), "", images.Options{})
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
