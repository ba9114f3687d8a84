package forge

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/sync/provider"
)

// Every provider maps a failed answer the same way.
func TestAnswerMapsFailedAnswers(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(now)
	failed := errors.New("the forge said no")
	header := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	resetIn := func(d time.Duration) func(http.Header) (time.Time, bool) {
		return func(http.Header) (time.Time, bool) { return now.Add(d), true }
	}

	b := NewBlocker(clk, "rate limited")
	assert.Same(t, failed, b.Answer(0, nil, failed, false, nil), "no answer")
	err := b.Answer(http.StatusNotFound, nil, failed, false, nil)
	assert.ErrorIs(t, err, provider.ErrNotFound)
	assert.EqualError(t, b.Answer(http.StatusBadGateway, nil, failed, false, nil), "502: the forge said no")
	assert.Same(t, failed, b.Answer(http.StatusBadGateway, nil, failed, true, nil), "a text that names the status already")
	require.NoError(t, b.Before(), "nothing blocks before a rate limit")

	for _, c := range []struct {
		name   string
		h      http.Header
		reset  func(http.Header) (time.Time, bool)
		blocks time.Duration
	}{
		{"Retry-After", header("Retry-After", "30"), resetIn(time.Hour), 30 * time.Second},
		{"the forge's window end", header(), resetIn(10 * time.Minute), 10 * time.Minute},
		{"a window end in the past", header(), resetIn(-time.Minute), time.Minute},
		{"nothing announced", header("Retry-After", "soon"), nil, time.Minute},
	} {
		b := NewBlocker(clk, "rate limited")
		err := b.Answer(http.StatusTooManyRequests, c.h, failed, false, c.reset)
		var rle *provider.RateLimitError
		require.ErrorAs(t, err, &rle, c.name)
		assert.Equal(t, now.Add(c.blocks), rle.Until, c.name)
		assert.ErrorAs(t, b.Before(), &rle, "%s: the next call is refused", c.name)
	}
}
