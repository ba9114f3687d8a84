package syncer_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/render"
)

// listRecorder records the label selectors of the syncer's lists of
// EphemeralEnvironments (watches left out).
type listRecorder struct {
	mu        sync.Mutex
	selectors []string
}

func (l *listRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		q := r.URL.Query()
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/ephemeralenvironments") && q.Get("watch") == "" {
			l.mu.Lock()
			l.selectors = append(l.selectors, q.Get("labelSelector"))
			l.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (l *listRecorder) reset() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.selectors
	l.selectors = nil
	return out
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (l *listRecorder) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.selectors)
}

// TestReconcileReadsItsEnvironmentsFromTheCache checks that a repository's
// reconcile reads its environments from sync's cache once the cache shows
// sync's own writes: listing them from the API server on every webhook was
// a request per event.
// A list that does go to the API server (the cache not showing a write
// yet) asks only for that repository's applications' environments: listing
// every environment sync wrote made a reconcile's cost grow with all of
// them.
func TestReconcileReadsItsEnvironmentsFromTheCache(t *testing.T) {
	t.Parallel()
	rec := &listRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(rec.wrap)
	other := strings.Replace(appYAML(""), "name: shop\nrepository: "+ghRepo, "name: other\nrepository: acme/other", 1)
	require.NotEqual(t, appYAML(""), other)
	h := newHarness(t, harnessOptions{files: map[string]string{"applications/shop.yaml": appYAML(""), "applications/other.yaml": other}, restConfig: cfg})

	shop := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	o := h.gh.OpenPullRequest("acme/other", githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := h.gh.PullRequestEvent("acme/other", o.Number, "opened")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	h.waitEnv(envName(shop.Number), nil)
	h.waitEnv(render.EnvironmentName("other", "acme/other", o.Number), nil)

	// Once the cache shows both writes, resyncs send no list at all.
	quiet := false
	for range 50 {
		n := rec.count()
		h.resync()
		h.resync()
		if rec.count() == n {
			quiet = true
			break
		}
	}
	assert.True(t, quiet, "every resync listed environments from the API server")

	managed := petriv1.LabelManagedBy + "=" + render.ManagedBy
	for _, sel := range rec.reset() {
		assert.Contains(t, []string{
			// The cache's own list: every environment sync manages.
			normalize(managed),
			normalize(managed + "," + render.LabelApplication + " in (shop)"),
			normalize(managed + "," + render.LabelApplication + " in (other)"),
		}, normalize(sel), "list of environments with selector %q", sel)
	}
}

// normalize orders a selector's comma-separated requirements.
func normalize(sel string) string {
	parts := strings.Split(sel, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	if len(parts) == 2 && parts[0] > parts[1] {
		parts[0], parts[1] = parts[1], parts[0]
	}
	return strings.Join(parts, ",")
}
