package syncer_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"

	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
)

// requestRecorder records the requests sync sends to the API server for
// one environment by name (reads and writes of that object, not lists or
// watches) and whether each carried a wake request.
type requestRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *requestRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(req *http.Request) (*http.Response, error) {
		if strings.Contains(req.URL.Path, "/ephemeralenvironments/") && req.URL.Query().Get("watch") == "" {
			what := req.Method + " " + req.URL.Path
			if req.Body != nil {
				body, err := io.ReadAll(req.Body)
				if err != nil {
					return nil, err
				}
				req.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(render.AnnotationWakeRequested)) {
					what += " (wake)"
				}
			}
			r.mu.Lock()
			r.seen = append(r.seen, what)
			r.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

func (r *requestRecorder) reset() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.seen
	r.seen = nil
	return out
}

// The read API's wake is open to whoever reaches sync: asking costs the API
// server nothing for a name sync does not know (read from the cache), and
// asking again and again writes an environment's wake request once a
// minute at most.
func TestWakeThroughTheReadAPICostsNoRequestPerCall(t *testing.T) {
	t.Parallel()
	rec := &requestRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(rec.wrap)
	h := newHarness(t, harnessOptions{files: shopFiles(""), restConfig: cfg})
	pr, name := h.deployed()
	h.waitComment(pr.Number, pr.HeadSHA[:7])
	require.Eventually(t, func() bool {
		e, err := h.get(name)
		if err != nil {
			return false
		}
		var cached petriv1.EphemeralEnvironment
		err = h.s.Cache().Get(h.ctx, client.ObjectKeyFromObject(e), &cached)
		return err == nil && cached.ResourceVersion == e.ResourceVersion
	}, 10*time.Second, 10*time.Millisecond, "sync's cache shows the environment")

	wake := func(name string) (int, time.Time) {
		resp, err := http.Post(h.url+api.EnvironmentsPath+"/"+name+"/wake", "", nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		var woke struct {
			WakeRequested time.Time `json:"wakeRequested"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&woke)
		return resp.StatusCode, woke.WakeRequested
	}
	rec.reset()
	for i := range 50 {
		code, _ := wake("no-such-environment-" + strings.Repeat("x", i%5))
		require.Equal(t, http.StatusNotFound, code)
	}
	var first time.Time
	for i := range 20 {
		code, at := wake(name)
		require.Equal(t, http.StatusAccepted, code)
		if i == 0 {
			first = at
		}
		assert.Equal(t, first, at, "a wake asked again within a minute is the one already asked")
	}
	var reads, wakes []string
	for _, r := range rec.reset() {
		switch {
		case strings.HasPrefix(r, http.MethodGet):
			reads = append(reads, r)
		case strings.HasSuffix(r, "(wake)"):
			wakes = append(wakes, r)
		}
	}
	assert.Empty(t, reads, "the wakes read environments from the cache")
	require.Len(t, wakes, 1, "one write for 20 wakes of one environment")
	assert.True(t, strings.HasPrefix(wakes[0], http.MethodPatch), wakes[0])
	e, err := h.get(name)
	require.NoError(t, err)
	assert.Equal(t, first.UTC().Format(time.RFC3339), e.Annotations[render.AnnotationWakeRequested])

	// A minute later the request is written again.
	h.clock.skipTo(first.Add(syncer.WakeEvery + time.Second))
	require.Eventually(t, func() bool {
		_, at := wake(name)
		return at.After(first)
	}, 10*time.Second, 10*time.Millisecond)
}
