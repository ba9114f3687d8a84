package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
)

// Build compiles the packages (import paths relative to the repository, such
// as ./cmd/petri-deployer) into dir and returns each binary's path by its
// base name. The Go build cache makes this a link step once warm.
func Build(dir string, pkgs ...string) (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"build", "-o", dir + "/"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	bins := map[string]string{}
	for _, p := range pkgs {
		name := path.Base(p)
		bins[name] = filepath.Join(dir, name)
	}
	return bins, nil
}
