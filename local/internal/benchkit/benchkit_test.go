package benchkit

import (
	"errors"
	"os"
	"sync"
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
		d := DistOf(tc.in)
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
	assert.Equal(t, time.Duration(198), DistOf(many).P99)
}

func TestParseStatCPU(t *testing.T) {
	// utime 100, stime 50, cutime 30, cstime 20 ticks; the command name
	// has a space and a parenthesis.
	line := "1234 (argocd repo) ) S 1 1234 1234 0 -1 4194560 100 0 0 0 100 50 30 20 20 0 10 0 100 1000 100"
	cpu, err := parseStatCPU(line, true)
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, cpu)
	cpu, err = parseStatCPU(line, false)
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Millisecond, cpu)
	_, err = parseStatCPU("1234 (x) S 1", true)
	assert.Error(t, err)
}

func TestProcOfThisProcess(t *testing.T) {
	rss, err := ProcStatusBytes(os.Getpid(), "VmRSS:")
	require.NoError(t, err)
	assert.Positive(t, rss)
	_, err = ProcStatusBytes(os.Getpid(), "NoSuchField:")
	assert.Error(t, err)
	_, err = ProcCPU(os.Getpid(), true)
	assert.NoError(t, err)
}

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "10,100", want: []int{10, 100}},
		{in: " 3 , ,2", want: []int{3, 2}},
		{in: "", want: nil},
		{in: "0", bad: true},
		{in: "x", bad: true},
	} {
		got, err := ParseCounts(tc.in)
		if tc.bad {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	assert.Equal(t, "10,100", FormatCounts([]int{10, 100}))
	assert.Equal(t, "", FormatCounts(nil))
}

func TestImageName(t *testing.T) {
	assert.Equal(t, "petri.dev/deployer", ImageName("petri.dev/deployer:bench"))
	assert.Equal(t, "localhost:5000/deployer", ImageName("localhost:5000/deployer"))
	assert.Equal(t, "deployer", ImageName("deployer"))
}

func TestForEach(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]bool{}
	require.NoError(t, ForEach(t.Context(), []int{1, 2, 3, 4, 5}, 2, func(n int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[n] = true
		return nil
	}))
	assert.Len(t, seen, 5)

	boom := errors.New("boom")
	err := ForEach(t.Context(), []int{1, 2, 3}, 1, func(n int) error {
		if n == 2 {
			return boom
		}
		return nil
	})
	assert.ErrorIs(t, err, boom)
}

func TestWorkDir(t *testing.T) {
	given := t.TempDir()
	dir, done, err := WorkDir(given, "benchkit-")
	require.NoError(t, err)
	assert.Equal(t, given, dir)
	done()
	assert.DirExists(t, given)

	dir, done, err = WorkDir("", "benchkit-")
	require.NoError(t, err)
	assert.DirExists(t, dir)
	done()
	assert.NoDirExists(t, dir)
}
