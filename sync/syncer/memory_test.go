package syncer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/render"
)

// limit is the memory limit of sync's Deployment.
const limit = 256 << 20

// TestSyncProcessStaysUnderItsMemoryLimitDuringAWebhookFlood runs the
// petri-sync binary with its default limits, as its Deployment does,
// against the real control plane, the GitHub stand-in and a config
// repository, and sends its webhook endpoint 50 concurrent 25 MiB
// deliveries that are not signed with its secret, over loopback, once with
// a Content-Length and once chunked. The process's peak resident memory
// stays under the Deployment's limit, and a signed delivery is served
// after the flood.
func TestSyncProcessStaysUnderItsMemoryLimitDuringAWebhookFlood(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sp := newSyncProcess(t, ctx, "syncmem", "petri-sync-memory")
	dir, ns, gh := sp.dir, sp.namespace, sp.gh

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	logFile, err := os.Create(filepath.Join(dir, "sync.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logFile.Close() })
	cmd := exec.CommandContext(ctx, sp.binary, append(sp.args(addr), "-leader-election-namespace", ns)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	base := "http://" + addr
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			return true // the assertion below says so
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 20*time.Millisecond)
	require.Nil(t, cmd.ProcessState, "petri-sync exited; see %s", logFile.Name())
	before := procStatus(t, cmd.Process.Pid, "VmRSS")

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, chunked := range []bool{false, true} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		answers := map[string]int{}
		for range 50 {
			wg.Go(func() {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+api.WebhookPath, &zeros{left: 25 << 20})
				if err != nil {
					return
				}
				req.ContentLength = 25 << 20
				if chunked {
					req.ContentLength = -1
				}
				req.Header.Set("X-GitHub-Event", "pull_request")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
				answer := "reset while sending"
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					answer = strconv.Itoa(resp.StatusCode)
				}
				mu.Lock()
				answers[answer]++
				mu.Unlock()
			})
		}
		wg.Wait()
		t.Logf("chunked=%v: %v", chunked, answers)
		for a := range answers {
			assert.Contains(t, []string{"413", "503", "reset while sending"}, a)
		}
	}
	peak := procStatus(t, cmd.Process.Pid, "VmHWM")
	t.Logf("petri-sync resident memory: %d MiB before, %d MiB at the peak, for 2 × 50 × 25 MiB unsigned deliveries (limit %d MiB)", before>>20, peak>>20, limit>>20)
	assert.Less(t, peak, int64(limit))

	// Still serving: a signed delivery writes its environment.
	pr := gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := gh.PullRequestEvent(ghRepo, pr.Number, "opened")
	require.NoError(t, err)
	resp, err := d.Send(ctx, nil, base+api.WebhookPath, []byte(secret))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Eventually(t, func() bool {
		var e petriv1.EphemeralEnvironment
		return env.Client.Get(ctx, client_key(ns, render.EnvironmentName("shop", ghRepo, pr.Number)), &e) == nil
	}, 30*time.Second, 20*time.Millisecond)
}

// zeros is a body of n bytes that allocates nothing.
type zeros struct{ left int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), z.left)
	clear(p[:n])
	z.left -= n
	return int(n), nil
}

// procStatus reads a memory figure (VmRSS, VmHWM) of a process, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
