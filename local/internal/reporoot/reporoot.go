// Package reporoot finds the root of Petri's repository, for the local
// stand-ins that start binaries kept in its bin/.
package reporoot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Find is the repository root (the directory holding Petri's go.mod)
// found from the working directory upwards.
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(data), "module github.com/petri-dev/petri\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod of github.com/petri-dev/petri) not found above the working directory")
		}
		dir = parent
	}
}
