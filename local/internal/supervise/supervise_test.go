package supervise_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/internal/supervise"
)

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// reports collects what a supervisor reports.
type reports struct {
	mu    sync.Mutex
	lines []string
	// at is closed when n lines are in.
	n  int
	at chan struct{}
}

func newReports(n int) *reports { return &reports{n: n, at: make(chan struct{})} }

func (r *reports) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
	if len(r.lines) == r.n {
		close(r.at)
	}
}

func (r *reports) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// A run that exits unasked is started again after the back-off, counted and
// logged; Stop ends it for good, without a restart.
func TestRestartsAnUnexpectedExitNotAStop(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "sleep.log")
	r := newReports(1)
	p, err := supervise.Start(supervise.Options{
		Name: "sleep", Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 600"},
		LogPath: logPath, Backoff: 100 * time.Millisecond, Logf: r.logf,
	})
	require.NoError(t, err)
	first, running := p.Pid()
	require.True(t, running)
	// Killed before its echo, the first run would leave nothing to count.
	require.True(t, eventually(10*time.Second, func() bool {
		log, _ := os.ReadFile(logPath)
		return strings.Contains(string(log), "started\n")
	}), "the first run's output is not in the log")

	require.NoError(t, p.Signal(syscall.SIGKILL))
	<-p.FirstExit()
	var second int
	require.True(t, eventually(10*time.Second, func() bool {
		second, running = p.Pid()
		return running && second != first
	}), "not started again")
	assert.Equal(t, 1, p.Restarts())
	reported := r.get()
	require.Len(t, reported, 1)
	assert.Contains(t, reported[0], "sleep exited unexpectedly (signal: killed)")
	assert.Contains(t, reported[0], "restart 1 in 100ms")
	require.True(t, eventually(10*time.Second, func() bool {
		log, _ := os.ReadFile(logPath)
		return strings.Count(string(log), "started\n") == 2
	}), "the second run's output is not appended to the log")
	log, err := os.ReadFile(logPath)
	require.NoError(t, err)
	assert.Contains(t, string(log), "--- ")
	assert.Contains(t, string(log), "sleep exited unexpectedly")

	p.Stop()
	select {
	case <-p.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
	_, running = p.Pid()
	assert.False(t, running)
	assert.Equal(t, 1, p.Restarts(), "a stop was restarted")
	assert.ErrorIs(t, syscall.Kill(second, 0), syscall.ESRCH, "the run Stop ended still runs")
}

// Quick exits in a row wait longer each time, as the kubelet's back-off.
func TestBackoffDoublesAfterQuickExits(t *testing.T) {
	r := newReports(4)
	p, err := supervise.Start(supervise.Options{
		Name: "false", Path: "/bin/false", LogPath: filepath.Join(t.TempDir(), "false.log"),
		Backoff: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond, Logf: r.logf,
	})
	require.NoError(t, err)
	select {
	case <-r.at:
	case <-time.After(10 * time.Second):
		t.Fatal("fewer than four restarts within 10s")
	}
	p.Stop()
	reported := r.get()
	for i, want := range []string{"in 20ms", "in 40ms", "in 80ms", "in 80ms"} {
		assert.Contains(t, reported[i], "exited unexpectedly (exit status 1)")
		assert.Contains(t, reported[i], fmt.Sprintf("restart %d %s", i+1, want))
	}
}

// The operator killed in a benchmark comes back and leads again: the
// supervisor starts it again and the new run takes the Lease the killed
// one could not release.
func TestKilledOperatorComesBackAndLeads(t *testing.T) {
	dir := t.TempDir()
	bins, err := controlplane.Build(filepath.Join(dir, "bin"), "./cmd/petri-operator")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "cluster"), 0o755))
	c, err := controlplane.Start(controlplane.Options{Dir: filepath.Join(dir, "cluster")})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	ctx := context.Background()
	ns, err := c.CreateNamespace(ctx, "supervise")
	require.NoError(t, err)

	p, err := supervise.Start(supervise.Options{
		Name: "petri-operator", Path: bins["petri-operator"],
		Args: []string{
			"--management-namespace=" + ns, "--shared-namespace=" + ns + "-shared",
			"--require-fences=false", "--workload-clusters=false",
			"--metrics-bind-address=0", "--health-probe-bind-address=0",
			// A short lease, so that the killed run's expires soon.
			"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s",
		},
		Env:     []string{"KUBECONFIG=" + c.Kubeconfig},
		LogPath: filepath.Join(dir, "operator.log"), Backoff: 200 * time.Millisecond,
		Logf: t.Logf,
	})
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	holder := func() string {
		var l coordinationv1.Lease
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "petri-operator.petri.dev"}, &l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var first string
	require.True(t, eventually(time.Minute, func() bool { first = holder(); return first != "" }), "the operator never led")

	require.NoError(t, p.Signal(syscall.SIGKILL))
	var second string
	require.True(t, eventually(time.Minute, func() bool {
		second = holder()
		return second != "" && second != first
	}), "no new run took the Lease (held by %q)", second)
	assert.Equal(t, 1, p.Restarts())
	_, running := p.Pid()
	assert.True(t, running)

	p.Stop()
	assert.Equal(t, 1, p.Restarts(), "the stopped operator was started again")
	assert.Empty(t, holder(), "the stopped operator did not release its Lease")
}
