package forges_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

// resyncPulls is how many open pull requests the unchanged resync reads.
const resyncPulls = 4

// TestResyncRequestsOnGitea counts the requests sync sends Gitea (through
// the fault proxy between them) in one resync with nothing changed, with
// resyncPulls open pull requests, each with its environment Ready, its
// commit status and its comment written. Sync resyncs every 6 s for the
// measurement; the requests of a resync come in one burst (quiet gaps
// under 2 s, also on a loaded machine, where a resync's second request
// can follow its first by more than a second), and the bursts between the
// first and the last seen are counted.
func TestResyncRequestsOnGitea(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	g := st.Gitea
	h := &hostileRun{t: t, ctx: ctx, g: g}
	require.NoError(t, st.SetSyncFlags(ctx, "-resync-interval=6s"))
	t.Cleanup(func() { require.NoError(t, st.SetSyncFlags(context.Background(), "-resync-interval=5m0s")) })
	onlyNewSyncPods(t, "-resync-interval=6s")

	var numbers []int
	for i := range resyncPulls {
		branch := fmt.Sprintf("feature/resync-%d", i)
		_, err := g.Server.Push(stack.DemoRepository, gitea.Commit{Branch: branch, Files: map[string]string{"r.txt": branch}, As: &g.Writer})
		require.NoError(t, err)
		n, err := g.Server.OpenPullRequest(stack.DemoRepository, gitea.PullRequest{Head: branch, Title: "Resync " + branch, As: &g.Writer})
		require.NoError(t, err)
		require.NoError(t, g.Server.AddLabels(stack.DemoRepository, n, hostileApp))
		numbers = append(numbers, n)
		t.Cleanup(func() {
			assert.NoError(t, g.Server.ClosePullRequest(stack.DemoRepository, n))
			h.waitGone(n)
		})
	}
	for _, n := range numbers {
		h.waitReady(n)
		require.Eventually(t, func() bool {
			cs := h.syncComments(n)
			return len(cs) == 1 && strings.Contains(cs[0].Body, "**Ready**")
		}, time.Minute, 50*time.Millisecond, "sync's comment on #%d says Ready", n)
		e := h.env(n)
		require.Eventually(t, func() bool {
			ss, err := g.Statuses(e.Spec.Source.SHA)
			return err == nil && len(ss) > 0 && ss[0].State == "success"
		}, time.Minute, 50*time.Millisecond, "sync's status on #%d is success", n)
	}

	b := &bursts{gap: 2 * time.Second}
	g.API.Watch(b.seen)
	defer g.API.Watch(nil)
	require.Eventually(t, func() bool { return len(b.complete()) >= 3 }, 2*time.Minute, 100*time.Millisecond,
		"three whole resyncs seen")
	counts := b.complete()
	t.Logf("Gitea: requests per unchanged resync with %d open pull requests: %v (by request: %s)", resyncPulls+openOthers(t, h), counts, b.kinds(1))
	for _, c := range counts[1:] {
		assert.Equal(t, counts[0], c, "every unchanged resync costs the same")
	}
}

// openOthers is the number of other open pull requests of the repository
// (a test before may leave one open when it fails).
func openOthers(t *testing.T, h *hostileRun) int {
	var open []struct {
		Number int `json:"number"`
	}
	require.NoError(t, h.g.Server.Call(nil, http.MethodGet, "/repos/"+stack.DemoRepository+"/pulls?state=open&limit=50", nil, &open))
	return len(open) - resyncPulls
}

// bursts groups the requests a proxy saw into bursts separated by at least
// gap of quiet.
type bursts struct {
	gap    time.Duration
	mu     sync.Mutex
	groups [][]string
	last   time.Time
}

func (b *bursts) seen(r *http.Request) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.groups) == 0 || now.Sub(b.last) > b.gap {
		b.groups = append(b.groups, nil)
	}
	b.groups[len(b.groups)-1] = append(b.groups[len(b.groups)-1], r.Method+" "+numbersOut.ReplaceAllString(r.URL.Path, "{n}"))
	b.last = now
}

var numbersOut = regexp.MustCompile(`/[0-9a-f]{40}|/[0-9]+`)

// complete are the sizes of the bursts seen whole: not the first (it may
// have begun before the watch) and not one that may still go on.
func (b *bursts) complete() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	end := len(b.groups)
	if time.Since(b.last) <= b.gap {
		end--
	}
	var out []int
	for i := 1; i < end; i++ {
		out = append(out, len(b.groups[i]))
	}
	return out
}

// kinds counts the requests of burst i by method and path.
func (b *bursts) kinds(i int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string]int{}
	for _, k := range b.groups[i] {
		m[k]++
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%d× %s", v, k))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// onlyNewSyncPods checks that a rollout of sync is over when SetSyncFlags
// returns: every pod left has the flag, and none is stopping, so no
// delivery sent from then on can reach a replica on its way out.
func onlyNewSyncPods(t *testing.T, flag string) {
	t.Helper()
	var pods corev1.PodList
	require.NoError(t, st.Client.List(context.Background(), &pods, client.InNamespace(stack.SyncNamespace)))
	require.NotEmpty(t, pods.Items)
	for _, p := range pods.Items {
		assert.Nil(t, p.DeletionTimestamp, "pod %s is still stopping", p.Name)
		assert.Contains(t, p.Spec.Containers[0].Args, flag, "pod %s is of the old template", p.Name)
	}
}
