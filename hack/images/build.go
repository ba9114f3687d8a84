package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Options say where the recipe's inputs are.
type Options struct {
	// Root is the module's root directory (the repository); the current
	// directory when empty.
	Root string
	// CACerts is the CA bundle put into the images that carry one;
	// CACertsPath on this machine when empty.
	CACerts string
	// Version goes into the images' org.opencontainers.image.version label.
	Version string
	// Go is the go command; "go" when empty.
	Go string
}

// Built is one image of the recipe.
type Built struct {
	Spec  Spec
	Image v1.Image
}

// Build builds the images of specs: their binaries in one go build
// (CGO_ENABLED=0, -trimpath, stripped), then each image of its binary, its
// trees and CA certificates.
func Build(ctx context.Context, specs []Spec, opts Options) ([]Built, error) {
	root := opts.root()
	tmp, err := os.MkdirTemp("", "petri-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := goBuild(ctx, opts.Go, root, tmp, specs); err != nil {
		return nil, err
	}
	built := make([]Built, 0, len(specs))
	for _, s := range specs {
		img, err := s.Image(filepath.Join(tmp, s.binaryName()), root, opts)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		built = append(built, Built{Spec: s, Image: img})
	}
	return built, nil
}

// Compile compiles the specs' packages as Build does, without linking
// them: Go's build cache then holds every package, and a Build that follows
// compiles nothing. From a cold cache the compile is most of a Build's time
// (minutes on two cores), which make test spends before its tests, not
// inside the timeout of a test that builds images.
func Compile(ctx context.Context, specs []Spec, opts Options) error {
	return goBuild(ctx, opts.Go, opts.root(), "", specs)
}

// root is the module's root directory: Root, or the current directory.
func (o Options) root() string {
	if o.Root == "" {
		return "."
	}
	return o.Root
}

// goBuild builds the specs' packages into dir, statically; with dir "" it
// compiles them and links nothing.
func goBuild(ctx context.Context, goCmd, root, dir string, specs []Spec) error {
	if goCmd == "" {
		goCmd = "go"
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w"}
	switch {
	case dir != "":
		args = append(args, "-o", dir+string(filepath.Separator))
	case len(specs) == 1:
		// One main package is linked unless its output goes nowhere.
		args = append(args, "-o", os.DevNull)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.binaryName()] {
			return fmt.Errorf("two images build a binary named %s", s.binaryName())
		}
		seen[s.binaryName()] = true
		args = append(args, s.Package)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Image is the spec's image with binary (built from Package) as its
// entrypoint; root is the repository its trees are read from.
func (s Spec) Image(binary, root string, opts Options) (v1.Image, error) {
	files := map[string]File{s.Binary: {Source: binary, Mode: 0o755}}
	if s.CACerts {
		ca := opts.CACerts
		if ca == "" {
			ca = CACertsPath
		}
		files[CACertsPath] = File{Source: ca}
	}
	for at, dir := range s.Trees {
		if err := treeFiles(at, filepath.Join(root, dir), files); err != nil {
			return nil, err
		}
	}
	return Assemble(files, Config{Entrypoint: s.Entrypoint(), Env: s.Env, Labels: s.Labels(opts.Version)})
}
