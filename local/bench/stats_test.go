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

func TestPerEnvironment(t *testing.T) {
	before := map[[2]string]float64{{"create", "jobs"}: 10, {"get", "namespaces"}: 5, {"watch", "jobs"}: 1}
	after := map[[2]string]float64{{"create", "jobs"}: 70, {"get", "namespaces"}: 25, {"patch", "ephemeralenvironments/status"}: 40, {"watch", "jobs"}: 1}
	byVerb, byRes := perEnvironment(before, after, 10)
	assert.Equal(t, map[string]float64{"create": 6, "get": 2, "patch": 4}, byVerb)
	assert.Equal(t, 6.0, byRes[[2]string{"create", "jobs"}])
	assert.NotContains(t, byRes, [2]string{"watch", "jobs"})
}

func TestUpdateDoc(t *testing.T) {
	r := &Results{Machine: Machine{CPUs: 2, Date: time.Now()}, Scale: []ScaleResult{
		{Mode: ModeNoop, Environments: 1000, AllReady: 42 * time.Second, PeakRSS: 100 << 20},
		{Mode: ModeFloor, Environments: 1000, AllReady: 30 * time.Second},
	}}
	dir := t.TempDir()

	fresh := filepath.Join(dir, "fresh.md")
	require.NoError(t, r.UpdateDoc(fresh))
	data, err := os.ReadFile(fresh)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "# Benchmarks\n"))
	assert.Contains(t, string(data), "| 1000 × 3 components, no-op deployer |")
	assert.Contains(t, string(data), "| RSS < 256 MiB | yes |")
	assert.Contains(t, string(data), "| operator ÷ floor 1.40x (≤ 1.3x) | no |", "the ratio to the floor, judged")

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
