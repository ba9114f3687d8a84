// Package pgserver finds PostgreSQL's server binaries on this machine: the
// server wrapper runs them, and the local runtime checks for them before it
// offers the PostgreSQL shared workload.
package pgserver

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrNotInstalled says how to install the binaries.
var ErrNotInstalled = errors.New("PostgreSQL's server binaries (initdb, postgres) are not installed: on Debian, run apt-get install -y postgresql as root (make postgres does it)")

// Bindir is the directory of initdb and postgres: the one of postgres on
// PATH, else the newest /usr/lib/postgresql/VERSION/bin.
func Bindir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if ok(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if ok(d) {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

func ok(dir string) bool {
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return false
		}
	}
	return true
}

func version(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}
