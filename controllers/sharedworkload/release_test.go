package sharedworkload

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/controllers/internal/options"
	"github.com/petri-dev/petri/controllers/internal/retry"
)

// A shared workload retries by a component's default policy; the option
// shortens its first wait only.
func TestSharedRetryPolicy(t *testing.T) {
	assert.Equal(t, retry.PolicyOf(nil), sharedRetryPolicy(options.Options{}))
	p := sharedRetryPolicy(options.Options{SharedWorkloadRetryBackoff: 500 * time.Millisecond})
	assert.Equal(t, int32(3), p.Attempts)
	assert.Equal(t, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, []time.Duration{p.Delay(1), p.Delay(2), p.Delay(3)})
}
