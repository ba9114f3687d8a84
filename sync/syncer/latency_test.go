package syncer_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
)

// TestWebhookToWriteLatency measures, over 200 signed synchronize webhooks
// against the real API server, the time from sending the webhook to seeing
// the EphemeralEnvironment written with the new commit (through a watch,
// so the figure includes the watch's delivery). It also counts the GitHub
// requests of a resync of the 20 open pull requests afterwards.
func TestWebhookToWriteLatency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	const prs, events = 20, 200
	var numbers []int
	for range prs {
		pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
		numbers = append(numbers, pr.Number)
	}
	for _, n := range numbers {
		h.waitEnv(envName(n), nil)
	}

	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: h.c.Scheme()})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &petriv1.EphemeralEnvironmentList{}, client.InNamespace(h.ns))
	require.NoError(t, err)
	defer w.Stop()

	latencies := make([]time.Duration, 0, events)
	for i := range events {
		n := numbers[i%prs]
		sha := githubapi.SHA(fmt.Sprintf("push %d", i))
		h.gh.UpdatePullRequest(ghRepo, n, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
		d, err := h.gh.PullRequestEvent(ghRepo, n, "synchronize")
		require.NoError(t, err)
		start := wall.Now()
		require.Equal(t, http.StatusAccepted, h.send(d))
	wait:
		for {
			select {
			case ev := <-w.ResultChan():
				e, ok := ev.Object.(*petriv1.EphemeralEnvironment)
				if ok && ev.Type == watch.Modified && e.Name == envName(n) && e.Spec.Source.SHA == sha {
					latencies = append(latencies, wall.Since(start))
					break wait
				}
			case <-ctx.Done():
				t.Fatalf("event %d: environment not written", i)
			}
		}
	}
	slices.Sort(latencies)
	p50 := latencies[len(latencies)*50/100]
	p99 := latencies[len(latencies)*99/100]
	t.Logf("webhook -> EphemeralEnvironment written (%d events, %d pull requests): p50 %s, p99 %s, max %s",
		len(latencies), prs, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), latencies[len(latencies)-1].Round(10*time.Microsecond))
	require.Less(t, p99, 5*time.Second)

	// Requests of resyncs: after the first (which sees changed listings),
	// an unchanged repository costs two conditional requests: its open
	// pull requests and its recent comments (commands whose webhook was
	// lost). Let the feedback of the last events finish first.
	// Feedback is done when two resyncs in a row cost two requests each
	// (one alone can fall between two feedback writes).
	require.Eventually(t, func() bool {
		before := len(h.gh.Requests())
		h.resync()
		mid := len(h.gh.Requests())
		h.resync()
		return mid == before+2 && len(h.gh.Requests()) == mid+2
	}, 20*time.Second, 50*time.Millisecond)
	h.gh.ResetRequests()
	h.resync()
	reqs := h.gh.Requests()
	t.Logf("GitHub requests per resync of an unchanged repository with %d open pull requests: %d (%d answered 304)", prs, len(reqs), count304(reqs))
	if out := os.Getenv("SYNC_LATENCY_REPORT"); out != "" {
		_ = os.WriteFile(out, []byte(fmt.Sprintf("p50=%s p99=%s max=%s resync_requests=%d\n", p50, p99, latencies[len(latencies)-1], len(reqs))), 0o644)
	}
	require.Len(t, reqs, 2)
	assert.Equal(t, 2, count304(reqs), "both answered 304: no rate limit spent")
}

func count304(reqs []githubapi.Request) int {
	n := 0
	for _, r := range reqs {
		if r.Status == http.StatusNotModified {
			n++
		}
	}
	return n
}
