// Package postgres_test plays the PostgreSQL shared workload of
// examples/postgres end to end: Petri on the local control plane, one real
// PostgreSQL server (Debian's server binaries), two pull requests with a
// database each. PostgreSQL must be installed (make postgres installs it);
// without it the test fails and says so.
package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/stack"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "petri-postgres-")
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
	pkgs := append([]string{"./cmd/petri-operator", "./cmd/petri-sync", "./cmd/petri-deployer", "./examples/app"}, stack.PostgresPackages...)
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
	if err := stack.WithPostgres(&opts, bins); err != nil {
		fmt.Fprintln(os.Stderr, "the PostgreSQL end-to-end test needs PostgreSQL:", err)
		return 1
	}
	st, err = stack.Start(context.Background(), opts)
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

var inputs sync.Once

// registerInputs looks at every file used through other processes, so that
// go test's cache is invalidated when any of them changes.
func registerInputs(t *testing.T) {
	t.Helper()
	inputs.Do(func() {
		require.NoError(t, controlplane.RegisterInputs("api", "cmd", "controllers", "deployer", "sync", "config", "examples", "local", "go.mod", "go.sum"))
	})
}

// Two pull requests get two databases with different roles and passwords on
// one PostgreSQL server; each application writes and reads its notes through
// its binding; neither role reaches the other's database; closing the first
// pull request drops its database and role although a connection to it is
// held open (DROP DATABASE ... WITH (FORCE)), and the second keeps working.
func TestTwoPullRequestsShareOnePostgresServer(t *testing.T) {
	registerInputs(t)
	ps := &stack.PostgresScenario{Stack: st, Report: stack.NewReport(os.Stderr), StepTimeout: 3 * time.Minute}
	res, err := ps.Run(context.Background())
	require.NoError(t, err)

	require.Len(t, res.Steps, 4)
	require.Len(t, res.Environments, 2)
	a, b := res.Environments[0], res.Environments[1]
	assert.NotEqual(t, a.Database, b.Database)
	assert.NotEqual(t, a.Role, b.Role)
	assert.Regexp(t, `^env_[0-9a-f]{8}$`, a.Database)
	assert.Contains(t, a.Notes, "\twritten by pull request #1\n")
	assert.NotContains(t, a.Notes, "pull request #2", "each environment reads only its own database")
	assert.Contains(t, b.Notes, "\twritten by pull request #2\n")
	assert.NotContains(t, b.Notes, "pull request #1")
	assert.Contains(t, res.CrossAccess, `permission denied for database "`+b.Database+`"`)
	assert.Contains(t, res.HeldConnection, "terminating connection", "the held connection was ended by the drop")
	assert.Contains(t, res.SecondAfterFirstClosed, "\twritten by pull request #2\n")
	assert.Contains(t, res.SecondAfterFirstClosed, "\twritten after #1 was closed\n")
	assert.Equal(t, []string{a.Database, a.Role, b.Database, b.Role}, res.Dropped)
}
