package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/controllers"
)

// A workload cluster whose credentials read nothing (its watches never
// sync), and whose Secret is edited again and again (each edit a new
// connection): each connection's watch ends with it, instead of piling up
// for the operator's life, each waiting for a cache that was stopped.
func TestReconnectsLeaveNoWatchesBehind(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Authenticated, so discovery answers; allowed to list nothing.
	cfg, err := env.UserConfig("petri-test-nobody")
	require.NoError(t, err)
	w := controllers.NewWatchRegistry(ctx)

	// A connection left alone keeps its watch.
	kept, err := w.Connect("near", "credentials", cfg)
	require.NoError(t, err)

	var previous func(context.Context) error
	for i := range 10 {
		ended, err := w.Connect("far", fmt.Sprint("credentials-", i), cfg)
		require.NoError(t, err)
		if previous != nil {
			requireEnded(ctx, t, previous, "connection %d's watch still waits after connection %d replaced it", i-1, i)
		}
		previous = ended
	}
	w.Disconnect("far")
	requireEnded(ctx, t, previous, "a stopped connection's watch ends")

	// Asked with a deadline, a watch that still waits says it timed out
	// (and is stopped by the asking).
	wait, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	err = kept(wait)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timed out waiting for cache to be synced", "the kept connection's watch still waits for its cache")
}

// requireEnded requires that a watch ended without syncing: it answers,
// with an error, before a deadline.
func requireEnded(ctx context.Context, t *testing.T, ended func(context.Context) error, msg string, args ...any) {
	t.Helper()
	wait, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	err := ended(wait)
	require.Error(t, err, "the watch could not have synced")
	require.NotContains(t, err.Error(), "timed out waiting", append([]any{msg}, args...)...)
	require.NotErrorIs(t, err, context.DeadlineExceeded, append([]any{msg}, args...)...)
}
