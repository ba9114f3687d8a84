package gitea_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/sync/provider"
	giteaprovider "github.com/petri-dev/petri/sync/provider/gitea"
)

// Gitea has no API rate limit of its own, so the real one never answers
// 429; a proxy in front of it may. This is the one behaviour tested against
// a handler rather than Gitea: a 429 with Retry-After stops every call
// until then.
func TestTooManyRequestsStopsCallsUntilRetryAfter(t *testing.T) {
	var calls atomic.Int32
	limited := atomic.Bool{}
	limited.Store(true)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		assert.Equal(t, "token tok", r.Header.Get("Authorization"))
		if limited.Load() {
			w.Header().Set("Retry-After", "30")
			http.Error(w, `{"message":"slow down"}`, http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	}))
	defer ts.Close()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(now)
	p, err := giteaprovider.New(giteaprovider.Options{BaseURL: ts.URL, Token: "tok", Clock: clk})
	require.NoError(t, err)
	ctx := context.Background()

	_, err = p.ListOpenPullRequests(ctx, "a/b")
	var rle *provider.RateLimitError
	require.True(t, errors.As(err, &rle), "%v", err)
	assert.Equal(t, now.Add(30*time.Second), rle.Until)
	require.EqualValues(t, 1, calls.Load())

	_, err = p.GetPullRequest(ctx, "a/b", 1)
	require.True(t, errors.As(err, &rle))
	assert.EqualValues(t, 1, calls.Load(), "no call before the announced time")

	limited.Store(false)
	clk.SetTime(now.Add(31 * time.Second))
	prs, err := p.ListOpenPullRequests(ctx, "a/b")
	require.NoError(t, err)
	assert.Empty(t, prs)
	assert.EqualValues(t, 2, calls.Load())
}
