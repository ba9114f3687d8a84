package syncer_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
)

// TestKilledLeaderProcessIsReplaced runs two petri-sync processes with the
// Lease timings their flags give (15 s, shorter than the defaults, for the
// test's sake) against the real control plane and SIGKILLs the one that
// leads, so that it releases nothing. While nobody leads, a webhook
// delivered to the survivor waits as a refresh mark on its repository's
// Repository and another pull request's webhook is lost altogether. The
// survivor takes the Lease once it expires (about 15 s), and both pull
// requests get their environment; every pull request carries one comment,
// posted once.
func TestKilledLeaderProcessIsReplaced(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sp := newSyncProcess(t, ctx, "synckill", "petri-sync-takeover")
	ns, gh := sp.namespace, sp.gh
	leaseNS, err := env.CreateNamespace(ctx, "petri-sync")
	require.NoError(t, err)

	start := func(id string) *replicaProcess { return sp.startReplica(t, ctx, cancel, leaseNS, id) }
	holder := func() string {
		var l coordinationv1.Lease
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: syncer.DefaultLeaseName}, &l); err != nil {
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	deliver := func(p *replicaProcess, number int) {
		d, err := gh.PullRequestEvent(ghRepo, number, "opened")
		require.NoError(t, err)
		resp, err := d.Send(ctx, nil, p.base+api.WebhookPath, []byte(secret))
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	environment := func(number int) func() bool {
		return func() bool {
			var e petriv1.EphemeralEnvironment
			return env.Client.Get(ctx, client_key(ns, render.EnvironmentName("shop", ghRepo, number)), &e) == nil
		}
	}
	pending := func() int { return len(pendingMarks(ctx, leaseNS)) }

	first := start("sync-1")
	require.Eventually(t, func() bool { return holder() == "sync-1" }, 30*time.Second, 20*time.Millisecond)
	second := start("sync-2")

	pr := gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	deliver(first, pr.Number)
	require.Eventually(t, environment(pr.Number), 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return len(gh.Comments(ghRepo, pr.Number)) == 1 }, 30*time.Second, 20*time.Millisecond)

	killed := wall.Now()
	require.NoError(t, first.cmd.Process.Kill())
	<-first.exited
	handed := gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	deliver(second, handed.Number)
	require.Eventually(t, func() bool { return pending() == 1 }, 10*time.Second, 20*time.Millisecond, "the follower records the event while nobody leads")
	lost := gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	assert.Equal(t, "sync-1", holder(), "the killed leader's Lease has not expired yet")

	require.Eventually(t, func() bool { return holder() == "sync-2" }, 30*time.Second, 50*time.Millisecond)
	takeover := wall.Since(killed)
	t.Logf("sync-2 took the Lease %s after sync-1 was SIGKILLed (Lease %s, retry %s)", takeover.Round(100*time.Millisecond), replicaLease, replicaRetry)
	assert.Less(t, takeover, replicaLease+3*replicaRetry, "about one Lease duration")

	require.Eventually(t, environment(handed.Number), 30*time.Second, 20*time.Millisecond, "the recorded event is acted on")
	require.Eventually(t, environment(lost.Number), 30*time.Second, 20*time.Millisecond, "the first resync closes the gap")
	require.Eventually(t, func() bool { return pending() == 0 }, 10*time.Second, 20*time.Millisecond)
	for _, n := range []int{pr.Number, handed.Number, lost.Number} {
		require.Eventually(t, func() bool { return len(gh.Comments(ghRepo, n)) == 1 }, 30*time.Second, 20*time.Millisecond, "comment on #%d", n)
		assert.Equal(t, 1, commentPosts(gh, n), "comments posted on #%d", n)
	}
	select {
	case <-second.exited:
		t.Fatal("the new leader exited")
	default:
	}
}

// The Lease timings the replica processes are given.
const (
	replicaLease = 15 * time.Second
	replicaRetry = 2 * time.Second
)

// replicaProcess is one petri-sync process of a leader election.
type replicaProcess struct {
	cmd    *exec.Cmd
	base   string
	exited chan struct{}
}

// startReplica runs petri-sync as one replica of a leader election in
// leaseNS, with identity id, and waits until it is ready; cancel ends it.
func (sp *syncProcess) startReplica(t *testing.T, ctx context.Context, cancel context.CancelFunc, leaseNS, id string) *replicaProcess {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	logFile, err := os.Create(filepath.Join(sp.dir, id+".log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = logFile.Close() })
	cmd := exec.CommandContext(ctx, sp.binary, append(sp.args(addr), "-resync-interval", "1h", "-comment-patience", harnessPatience.String(),
		"-leader-election-namespace", leaseNS, "-leader-election-id", id,
		"-leader-election-lease-duration", replicaLease.String(), "-leader-election-renew-deadline", "10s",
		"-leader-election-retry-period", replicaRetry.String())...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	p := &replicaProcess{cmd: cmd, base: "http://" + addr, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { cancel(); <-p.exited })
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.base + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 20*time.Millisecond, "%s not ready; see %s", id, logFile.Name())
	return p
}
