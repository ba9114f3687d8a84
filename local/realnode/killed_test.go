package realnode_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/local/realnode"
)

// childEnv makes the test binary a node that is killed: it starts a node
// under the directory it names, runs a pod, says so and waits.
const childEnv = "PETRI_REALNODE_KILLED_CHILD"

// runChild is the killed run: a node with a Ready pod, so containers and
// their shims are running when it dies.
func runChild(parent string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, err := realnode.Start(ctx, realnode.Options{Dir: parent})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	if err := loadTestApp(ctx, n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pods := n.Cluster.Clientset.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, helloPod(map[string]string{"app": "hello"}), metav1.CreateOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		if pod, err := pods.Get(ctx, "hello", metav1.GetOptions{}); err == nil && podReady(pod) {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "pod hello not Ready")
			return 1
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Printf("READY %s %s %s\n", n.Marker, n.Dir, n.NetNSInode)
	<-ctx.Done()
	return 1
}

// TestKilledRunIsSwept kills (SIGKILL) a test process whose node runs a
// pod, then checks that what outlives it (the shims and containers, the
// control plane) is found and removed by the sweep the next Start makes.
func TestKilledRunIsSwept(t *testing.T) {
	parent := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+parent)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY ") {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(150 * time.Second):
		t.Fatal("the killed run's node did not start")
	}
	f := strings.Fields(line)
	require.Len(t, f, 4, line)
	marker, dir, netns := f[1], f[2], f[3]
	owned, err := os.ReadFile(filepath.Join(dir, "controlplane-owned"))
	require.NoError(t, err)

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	require.Eventually(t, func() bool {
		return !processRuns(marker + "-holder")
	}, 10*time.Second, 50*time.Millisecond, "the holder dies with the killed process")
	left := realnode.Leftovers(dir, marker, netns)
	require.NotEmpty(t, left, "a killed run leaves its shims, containers and cgroups behind until swept")
	t.Logf("left by the killed run before the sweep: %d items", len(left))

	require.NoError(t, realnode.Sweep(parent))
	assert.Empty(t, realnode.Leftovers(dir, marker, netns), "nothing of the killed run after the sweep")
	for _, l := range strings.Split(strings.TrimSpace(string(owned)), "\n") {
		kind, value, _ := strings.Cut(l, " ")
		switch kind {
		case "process":
			pid, _ := strconv.Atoi(strings.Fields(value)[0])
			assert.False(t, sameProcess(pid, value), "control plane process %s killed", value)
		case "dir":
			_, err := os.Stat(value)
			assert.True(t, os.IsNotExist(err), "control plane directory %s removed", value)
		}
	}
}

func processRuns(argv0 string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(cmdline), argv0) {
			return true
		}
	}
	return false
}

// sameProcess reports whether pid is still the process identified by
// "pid starttime".
func sameProcess(pid int, identity string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	fields := strings.Fields(rest)
	return len(fields) > 19 && fmt.Sprintf("%d %s", pid, fields[19]) == identity
}
