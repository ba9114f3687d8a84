package images

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Ref is the name of image under registry (host[:port][/path]) with tag.
func Ref(registry, image, tag string) string {
	return strings.TrimSuffix(registry, "/") + "/" + image + ":" + tag
}

// WriteLayout writes the images into an OCI image layout at dir, each
// annotated with its name (org.opencontainers.image.ref.name).
func WriteLayout(dir, registry, tag string, built []Built) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	for _, b := range built {
		ref := Ref(registry, b.Spec.Name, tag)
		if err := p.AppendImage(b.Image, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
			return fmt.Errorf("OCI layout %s: %s: %w", dir, ref, err)
		}
	}
	return nil
}

// WriteTarball writes the images into one tarball that docker load,
// podman load and ctr images import take.
func WriteTarball(file, registry, tag string, built []Built) error {
	refs := map[name.Reference]v1.Image{}
	for _, b := range built {
		t, err := name.NewTag(Ref(registry, b.Spec.Name, tag))
		if err != nil {
			return err
		}
		refs[t] = b.Image
	}
	if err := tarball.MultiRefWriteToFile(file, refs); err != nil {
		return fmt.Errorf("tarball %s: %w", file, err)
	}
	return nil
}

// Push pushes the images to registry with tag; insecure allows plain HTTP
// (a registry on this machine or a test node). Credentials come from the
// Docker config (docker login), as for docker push.
func Push(ctx context.Context, registry, tag string, insecure bool, built []Built) error {
	var nameOpts []name.Option
	if insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	for _, b := range built {
		ref := Ref(registry, b.Spec.Name, tag)
		t, err := name.NewTag(ref, nameOpts...)
		if err != nil {
			return err
		}
		if err := remote.Write(t, b.Image, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return nil
}

// Size is the compressed size of the image's layers: what a pull fetches
// beside the manifest and configuration.
func Size(img v1.Image) (int64, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
