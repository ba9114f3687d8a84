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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stacktest.Main(m, &st, stacktest.Config{Prefix: "postgres", Packages: stack.PostgresPackages, Setup: func(_ string, bins map[string]string, o *stack.Options) error {
		if err := stack.WithPostgres(o, bins); err != nil {
			return fmt.Errorf("the PostgreSQL end-to-end test needs PostgreSQL: %w", err)
		}
		return nil
	}}))
}

// Two pull requests get two databases with different roles and passwords on
// one PostgreSQL server; each application writes and reads its notes through
// its binding; neither role reaches the other's database; closing the first
// pull request drops its database and role although a connection to it is
// held open (DROP DATABASE ... WITH (FORCE)), and the second keeps working.
func TestTwoPullRequestsShareOnePostgresServer(t *testing.T) {
	stacktest.RegisterInputs(t)
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
