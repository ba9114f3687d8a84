package controllers

import (
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// watchesWaiting counts the goroutines of sources still waiting for a
// workload cluster's cache (a Kind source's start, which ends once its
// cache synced or its context ended).
func watchesWaiting(t *testing.T) int {
	t.Helper()
	var b strings.Builder
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&b, 2))
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "internal/source.(*Kind[") && strings.Contains(g, "Start.func") {
			n++
		}
	}
	return n
}

// A workload cluster that does not answer, whose Secret is edited again and
// again (each edit a new connection): the watches of each connection end
// with it, instead of piling up, each waiting for a cache that was stopped
// before it synced.
func TestReconnectsLeaveNoWatchesBehind(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := watchesWaiting(t)

	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	events := newClusterEvents("test")
	require.NoError(t, events.Start(ctx, q))
	reg := newClusterRegistry(DefaultOptions())
	reg.onConnect = func(c *clusterConn) error {
		events.add(c.ctx, c.name, source.Kind[client.Object](c.cluster.GetCache(), &batchv1.Job{},
			handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return nil })))
		return nil
	}
	go func() { _ = reg.Start(ctx) }()
	require.Eventually(t, reg.started, 5*time.Second, 10*time.Millisecond)

	// A documentation address (TEST-NET-1): nothing answers there.
	cfg := &rest.Config{Host: "https://192.0.2.1:6443", BearerToken: "t", Timeout: time.Second}
	for i := range 10 {
		_, err := reg.connect("far", fmt.Sprint("credentials-", i), cfg)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return watchesWaiting(t)-before <= 1 }, 10*time.Second, 10*time.Millisecond,
			"connection %d: the earlier connections' watches ended", i)
	}
	require.Eventually(t, func() bool { return watchesWaiting(t)-before == 1 }, 10*time.Second, 10*time.Millisecond,
		"the live connection's watch waits for its cache")
	reg.disconnect("far")
	require.Eventually(t, func() bool { return watchesWaiting(t) == before }, 10*time.Second, 10*time.Millisecond)
}
