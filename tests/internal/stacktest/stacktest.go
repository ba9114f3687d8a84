// Package stacktest starts Petri on the local control plane for the
// end-to-end test packages under tests/: it builds the binaries, starts the
// stack (local/stack) before the package's tests and stops it after them,
// keeping the run's directory and naming its pod logs when a test fails.
// It is for tests only; nothing outside tests/ imports it.
package stacktest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/stack"
)

// Config says how a package's stack differs from the default one.
type Config struct {
	// Prefix names the run's temporary directory (petri-<Prefix>-*).
	Prefix string
	// Packages are built besides the operator, sync, the deployer and the
	// example application.
	Packages []string
	// Setup may change the options before the start; dir is the run's
	// directory and bins the built binaries by name.
	Setup func(dir string, bins map[string]string, o *stack.Options) error
}

// Main runs a package's tests with Petri started: call it from TestMain as
// os.Exit(stacktest.Main(m, &st, cfg)). st is set before any test runs.
// PETRI_KEEP_CLUSTER_DIR keeps the run's directory even when every test
// passes.
func Main(m *testing.M, st **stack.Stack, cfg Config) int {
	ctrllog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "petri-"+cfg.Prefix+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	keep := os.Getenv("PETRI_KEEP_CLUSTER_DIR") != ""
	defer func() {
		if !keep {
			_ = os.RemoveAll(dir)
		}
	}()
	pkgs := append([]string{"./cmd/petri-operator", "./cmd/petri-sync", "./cmd/petri-deployer", "./examples/app"}, cfg.Packages...)
	bins, err := controlplane.Build(filepath.Join(dir, "bin"), pkgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := stack.Options{
		Dir: filepath.Join(dir, "run"),
		Binaries: map[string]string{
			stack.BinOperator:   bins["petri-operator"],
			stack.BinSync:       bins["petri-sync"],
			stack.BinDeployer:   bins["petri-deployer"],
			stack.BinExampleApp: bins["app"],
			stack.BinKubectl:    filepath.Join(assets, "kubectl"),
		},
		IngressAddress: "localhost:0",
		Report:         stack.NewReport(os.Stderr),
	}
	if cfg.Setup != nil {
		if err := cfg.Setup(dir, bins, &opts); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	s, err := stack.Start(context.Background(), opts)
	if err != nil {
		keep = true
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "kept for inspection:", dir)
		return 1
	}
	defer s.Stop()
	*st = s
	code := m.Run()
	if code != 0 {
		keep = true
		fmt.Fprintf(os.Stderr, "logs of every pod: %s\n", s.LogDir())
	}
	return code
}

var inputs sync.Once

// RegisterInputs looks at every file the stack uses through other
// processes (the binaries built from Petri's sources, the manifests
// kubectl applies, the charts the deployer loads), so that go test's
// result cache is invalidated when any of them changes. go test records
// file accesses only while tests run, so each test calls it.
func RegisterInputs(t *testing.T) {
	t.Helper()
	inputs.Do(func() {
		require.NoError(t, controlplane.RegisterInputs("api", "cmd", "controllers", "deployer", "sync", "config", "charts", "examples", "local", "tests", "go.mod", "go.sum"))
	})
}

// AssertForgeRun checks what every forge's demo scenario must have seen of
// Petri: the opened and the pushed commit deployed into environment, the
// release upgraded in place by the push and by the honoured command.
func AssertForgeRun(t *testing.T, run stack.ForgeRun, environment string) {
	t.Helper()
	require.Len(t, run.SHAs, 2)
	assert.NotEqual(t, run.SHAs[0], run.SHAs[1])
	assert.Equal(t, environment, run.Environment)
	require.Len(t, run.Revisions, 3)
	assert.Equal(t, []int{run.Revisions[0], run.Revisions[0] + 1, run.Revisions[0] + 2}, run.Revisions, "push and command upgraded the release in place")
}
