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

// TestReconcileListsOnlyItsRepository checks that a repository's reconcile
// reads from the API server only the environments of that repository's
// applications: listing every environment sync wrote on every webhook made
// a reconcile's cost grow with all of them.
func TestReconcileListsOnlyItsRepository(t *testing.T) {
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

	rec.reset()
	h.resync()
	h.resync()
	selectors := rec.reset()
	require.NotEmpty(t, selectors, "a resync lists the environments")
	managed := petriv1.LabelManagedBy + "=" + render.ManagedBy
	for _, sel := range selectors {
		assert.Contains(t, []string{
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
