// Package chaos_test runs the short version of every fault-injection
// scenario of local/chaos (make chaos runs the full ones) against Petri on
// the local control plane, and fails on any violated invariant.
package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/local/chaos"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/stack"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "petri-chaos-")
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
	bins, err := controlplane.Build(filepath.Join(dir, "bin"), "./cmd/petri-operator", "./cmd/petri-sync", "./cmd/petri-deployer", "./examples/app")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	source := filepath.Join(dir, "config-source")
	if err := chaos.ConfigRepo(source); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, err = stack.Start(context.Background(), stack.Options{
		Dir: filepath.Join(dir, "run"),
		Binaries: map[string]string{
			stack.BinOperator:   bins["petri-operator"],
			stack.BinSync:       bins["petri-sync"],
			stack.BinDeployer:   bins["petri-deployer"],
			stack.BinExampleApp: bins["app"],
			stack.BinKubectl:    filepath.Join(assets, "kubectl"),
		},
		IngressAddress: "localhost:0",
		ConfigSource:   source,
		Report:         stack.NewReport(os.Stderr),
	})
	if err != nil {
		keep = true
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "kept for inspection:", dir)
		return 1
	}
	defer st.Stop()
	code := m.Run()
	if code != 0 {
		keep = true
		fmt.Fprintf(os.Stderr, "logs of every pod: %s\n", st.LogDir())
	}
	return code
}

// TestShortChaos plays the short version of every scenario and fails on any
// violation of any invariant, or on a scenario the suite could not carry
// out.
func TestShortChaos(t *testing.T) {
	// go test caches results by the files a test looks at: the binaries
	// built from these sources and the charts the deployer loads must
	// count.
	require.NoError(t, controlplane.RegisterInputs("api", "cmd", "controllers", "deployer", "sync", "config", "examples", "local", "go.mod", "go.sum"))
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	seed := time.Now().UnixNano() % 1_000_000_007
	res, err := chaos.Run(ctx, st, chaos.Options{Size: chaos.Short, Seed: seed, Log: testWriter{t}})
	require.NoError(t, err)
	var table bytes.Buffer
	chaos.WriteTable(&table, res)
	t.Logf("seed %d\n%s", seed, table.String())

	require.Len(t, res.Rows, 7, "every scenario has a row")
	for _, r := range res.Rows {
		if r.NotRun != "" {
			assert.Equal(t, 7, r.Number, "only the sync leader scenario may be missing, and only while sync has no leader election: %s", r.NotRun)
			continue
		}
		assert.NoError(t, r.Err, "scenario %d: %s", r.Number, r.Name)
		assert.NotEmpty(t, r.Faults, "scenario %d injected faults", r.Number)
		assert.Positive(t, r.Environments, "scenario %d had environments", r.Number)
		for _, inv := range chaos.Invariants() {
			for _, v := range r.Violations[inv] {
				t.Errorf("scenario %d (%s), %s: %s", r.Number, r.Name, inv.Column(), v.Detail)
			}
		}
	}
}

// testWriter sends the suite's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
