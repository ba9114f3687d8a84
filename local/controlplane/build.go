package controlplane

import (
	"fmt"
	"io/fs"
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

// RegisterInputs stats every file under the given repository paths, so that
// go test's result cache, which records the files a test looks at, is
// invalidated when sources built by Build or read by other processes change.
// go test records accesses only while tests run: call it from a test, not
// from TestMain.
func RegisterInputs(paths ...string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, p := range paths {
		err := filepath.WalkDir(filepath.Join(root, p), func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			_, err = os.Stat(path)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}
