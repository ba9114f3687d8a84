package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDistOf(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		in                []time.Duration
		median, p99, maxv time.Duration
	}{
		{nil, 0, 0, 0},
		{ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 2500 * time.Microsecond, 4 * time.Millisecond, 4 * time.Millisecond},
		{ms(5, 1, 3), 3 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
	} {
		d := distOf(tc.in)
		assert.Equal(t, len(tc.in), d.N)
		assert.Equal(t, tc.median, d.Median, "median of %v", tc.in)
		assert.Equal(t, tc.p99, d.P99, "p99 of %v", tc.in)
		assert.Equal(t, tc.maxv, d.Max)
	}
	// Nearest rank: the 99th percentile of 200 samples is the 198th.
	var many []time.Duration
	for i := 1; i <= 200; i++ {
		many = append(many, time.Duration(i))
	}
	assert.Equal(t, time.Duration(198), distOf(many).P99)
}

func TestPerEnvironment(t *testing.T) {
	before := map[[2]string]float64{{"create", "jobs"}: 10, {"get", "namespaces"}: 5, {"watch", "jobs"}: 1}
	after := map[[2]string]float64{{"create", "jobs"}: 70, {"get", "namespaces"}: 25, {"patch", "ephemeralenvironments/status"}: 40, {"watch", "jobs"}: 1}
	byVerb, byRes := perEnvironment(before, after, 10)
	assert.Equal(t, map[string]float64{"create": 6, "get": 2, "patch": 4}, byVerb)
	assert.Equal(t, 6.0, byRes[[2]string{"create", "jobs"}])
	assert.NotContains(t, byRes, [2]string{"watch", "jobs"})
}

func TestUpdateDoc(t *testing.T) {
	r := &Results{Machine: Machine{CPUs: 2, Date: time.Now()}, Scale: []ScaleResult{{Mode: ModeNoop, Environments: 1000, AllReady: 42 * time.Second, PeakRSS: 100 << 20}}}
	dir := t.TempDir()

	fresh := filepath.Join(dir, "fresh.md")
	require.NoError(t, r.UpdateDoc(fresh))
	data, err := os.ReadFile(fresh)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "# Benchmarks\n"))
	assert.Contains(t, string(data), "| 1000 × 3 components, no-op deployer |")
	assert.Contains(t, string(data), "| Ready ≤ 60 s, RSS < 256 MiB | yes |")

	// Twice: the generated part is replaced, the rest stays.
	kept := filepath.Join(dir, "kept.md")
	require.NoError(t, os.WriteFile(kept, []byte("# Benchmarks\n\nBefore.\n"), 0o644))
	require.NoError(t, r.UpdateDoc(kept))
	require.NoError(t, os.WriteFile(kept, append(mustRead(t, kept), []byte("\n## After\n")...), 0o644))
	r.Scale[0].AllReady = 90 * time.Second
	require.NoError(t, r.UpdateDoc(kept))
	doc := string(mustRead(t, kept))
	assert.Equal(t, 1, strings.Count(doc, BeginMarker))
	assert.Equal(t, 1, strings.Count(doc, EndMarker))
	assert.Contains(t, doc, "Before.\n")
	assert.Contains(t, doc, "\n## After\n")
	assert.Contains(t, doc, "| 90.0 s |")
	assert.NotContains(t, doc, "| 42.0 s |")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}
