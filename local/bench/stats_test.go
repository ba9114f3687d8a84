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

// A run that did not measure at rest keeps the at-rest part of the
// document; one that did replaces it, and the first one puts it right after
// the main part.
func TestUpdateDocKeepsAtRestUnlessMeasured(t *testing.T) {
	atRest := func(revision string) AtRestResult {
		return AtRestResult{Side: SideAfter, Revision: revision, Samples: 4, Jobs: 500, JobsStarted: 100,
			Options: AtRestOptions{Environments: 1000, VerifyInterval: time.Minute, JobTTL: 6 * time.Minute, Window: 2 * time.Minute}}
	}
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	require.NoError(t, os.WriteFile(path, []byte("# Benchmarks\n\n"+BeginMarker+"\nold\n"+EndMarker+"\n\n## Peers\n\nKept.\n"), 0o644))

	measured := &Results{Machine: Machine{CPUs: 2, Date: time.Now()}, AtRest: []AtRestResult{atRest("aaaaaaa")}}
	require.NoError(t, measured.UpdateDoc(path))
	doc := string(mustRead(t, path))
	assert.Contains(t, doc, EndMarker+"\n\n"+AtRestBeginMarker+"\n", "the at-rest part follows the main one")
	assert.Contains(t, doc, AtRestEndMarker+"\n\n## Peers\n\nKept.\n")
	assert.Contains(t, doc, "| at rest, per 1,000 idle environments | after (aaaaaaa) |")

	scaleOnly := &Results{Machine: Machine{CPUs: 2, Date: time.Now()}, Scale: []ScaleResult{{Mode: ModeNoop, Environments: 100, AllReady: 20 * time.Second}}}
	require.NoError(t, scaleOnly.UpdateDoc(path))
	doc = string(mustRead(t, path))
	assert.Contains(t, doc, "| 100 × 3 components, no-op deployer |", "the main part is the new run's")
	assert.Contains(t, doc, "| at rest, per 1,000 idle environments | after (aaaaaaa) |", "the at-rest part is kept")
	assert.Contains(t, doc, "At rest was not measured in this run")

	require.NoError(t, (&Results{Machine: Machine{CPUs: 2, Date: time.Now()}, AtRest: []AtRestResult{atRest("bbbbbbb")}}).UpdateDoc(path))
	doc = string(mustRead(t, path))
	assert.Contains(t, doc, "| at rest, per 1,000 idle environments | after (bbbbbbb) |")
	assert.NotContains(t, doc, "aaaaaaa")
	for _, m := range []string{BeginMarker, EndMarker, AtRestBeginMarker, AtRestEndMarker} {
		assert.Equal(t, 1, strings.Count(doc, m), m)
	}
	assert.Contains(t, doc, "## Peers\n\nKept.\n")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}
