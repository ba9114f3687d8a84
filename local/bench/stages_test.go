package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/internal/benchkit"
)

func TestFloorRatioPairsEachFloorRunWithTheNoopRunBeforeIt(t *testing.T) {
	r := &Results{Scale: []ScaleResult{
		{Mode: ModeNoop, Environments: 100, AllReady: 10 * time.Second},
		{Mode: ModeFloor, Environments: 100, AllReady: 10 * time.Second},
		{Mode: ModeNoop, Environments: 100, AllReady: 14 * time.Second},
		{Mode: ModeFloor, Environments: 100, AllReady: 10 * time.Second},
		{Mode: ModeNoop, Environments: 500, AllReady: 50 * time.Second, NotReady: 3},
		{Mode: ModeFloor, Environments: 500, AllReady: 40 * time.Second},
	}}
	ratio, met := r.floorRatio(1)
	assert.Equal(t, "operator ÷ floor 1.00x (≤ 1.3x)", ratio)
	assert.Equal(t, "yes", met)
	ratio, met = r.floorRatio(3)
	assert.Equal(t, "operator ÷ floor 1.40x (≤ 1.3x)", ratio, "the second floor run is paired with the second no-op run")
	assert.Equal(t, "no", met)
	ratio, _ = r.floorRatio(5)
	assert.Empty(t, ratio, "an operator run that missed environments has no ratio")
}

func TestStagesOfAnEnvironment(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	jobs := map[[2]string]*jobTimes{
		{"e1", "db"}:  {created: at(300), podDone: at(1300), complete: at(2300)},
		{"e1", "web"}: {created: at(400), podDone: at(1400)},
		{"e1", "api"}: {created: at(1500), podDone: at(2500)},
		// e2 has not started api yet, and is not Ready.
		{"e2", "db"}:  {created: at(100), podDone: at(1100)},
		{"e2", "web"}: {created: at(200)},
	}
	created := map[string]time.Time{"e1": at(0), "e2": at(0), "e3": at(0)}
	ready := map[string]time.Time{"e1": at(2700)}
	st := stagesOf(jobs, created, ready)

	assert.Equal(t, 2, st.ToFirstJob.N, "e3 has no Jobs")
	assert.Equal(t, 300*time.Millisecond, st.ToFirstJob.Max)
	assert.Equal(t, 200*time.Millisecond, st.ToFirstJob.Median, "e1's 300 ms (db) and e2's 100 ms (db)")
	assert.Equal(t, 4, st.JobToPodDone.N, "every pod that succeeded")
	assert.Equal(t, time.Second, st.JobToPodDone.Median)
	assert.Equal(t, 1, st.PodDoneToJobComplete.N)
	assert.Equal(t, time.Second, st.PodDoneToJobComplete.Median)
	assert.Equal(t, 1, st.DependencyToJob.N, "e2's api Job is not created")
	assert.Equal(t, 200*time.Millisecond, st.DependencyToJob.Median)
	assert.Equal(t, 1, st.LastPodToReady.N)
	assert.Equal(t, 200*time.Millisecond, st.LastPodToReady.Median, "Ready after api, the later of api and web")
	assert.Equal(t, 2700*time.Millisecond, st.Ready.Median)
}

func TestStagesTableListsRunsWithStages(t *testing.T) {
	var b strings.Builder
	writeStages(&b, []ScaleResult{
		{Mode: ModeNoop, Environments: 100, Stages: Stages{Ready: benchkit.DistOf([]time.Duration{12 * time.Second})}},
		{Mode: ModeFloor, Environments: 100},
	})
	require.Contains(t, b.String(), "| 100, no-op deployer | - | - | - | - | - | 12.0 s / 12.0 s |")
	assert.NotContains(t, b.String(), "floor: raw writes", "a run without stages has no row")

	b.Reset()
	writeStages(&b, []ScaleResult{{Mode: ModeFloor, Environments: 100}})
	assert.Empty(t, b.String(), "no table without stages")
}

// A run in which the operator exited and was started again says so where
// its time to Ready is shown, since its figures count from the restart.
func TestReadyCellNamesOperatorRestarts(t *testing.T) {
	s := ScaleResult{AllReady: 12 * time.Second, NotReady: 2, OperatorRestarts: 1}
	assert.Contains(t, s.readyCell(), "(2 missing) (operator restarted 1×)")
	s.OperatorRestarts = 0
	assert.NotContains(t, s.readyCell(), "restarted")
}
