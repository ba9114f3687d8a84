// Package chaos_test runs the short version of every fault-injection
// scenario of local/chaos (make chaos runs the full ones) against Petri on
// the local control plane, and fails on any violated invariant.
package chaos_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/chaos"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stacktest.Main(m, &st, stacktest.Config{Prefix: "chaos", Setup: func(dir string, _ map[string]string, o *stack.Options) error {
		o.ConfigSource = filepath.Join(dir, "config-source")
		o.Forges = chaos.Forges
		o.Clusters = chaos.Clusters
		return chaos.ConfigRepo(o.ConfigSource, chaos.Forges...)
	}}))
}

// TestShortChaos plays the short version of every scenario and fails on any
// violation of any invariant, or on a scenario the suite could not carry
// out.
func TestShortChaos(t *testing.T) {
	// go test caches results by the files a test looks at: the binaries
	// built from these sources and the charts the deployer loads must
	// count.
	stacktest.RegisterInputs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	seed := time.Now().UnixNano() % 1_000_000_007
	res, err := chaos.Run(ctx, st, chaos.Options{Size: chaos.Short, Seed: seed, Log: testWriter{t}})
	require.NoError(t, err)
	var table bytes.Buffer
	chaos.WriteTable(&table, res)
	t.Logf("seed %d\n%s", seed, table.String())

	require.Len(t, res.Rows, 10, "every scenario has a row")
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
