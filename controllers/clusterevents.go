package controllers

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// clusterEvents is the one source through which a controller hears every
// workload cluster it is connected to. controller-runtime cannot remove a
// watch: a source given to Controller.Watch runs for the controller's life,
// so one per connection piled up with every change of a cluster's Secret,
// and a source whose cluster's cache was stopped before it synced waited
// for it for ever. Instead the controller watches this source once, and
// each connection starts its own sources with its own context and the
// controller's queue (add): they end with the connection.
type clusterEvents struct {
	name    string
	once    sync.Once
	started chan struct{}
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func newClusterEvents(name string) *clusterEvents {
	return &clusterEvents{name: name, started: make(chan struct{})}
}

// Start is called once by the controller with its queue (source.Source).
func (s *clusterEvents) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.once.Do(func() {
		s.queue = q
		close(s.started)
	})
	return nil
}

func (s *clusterEvents) String() string { return "workload clusters' events for " + s.name }

// add starts src for one connection, as soon as the controller has started
// (it may not have yet: the connection can come before the operator leads),
// and until ctx, the connection's, ends. It never blocks.
func (s *clusterEvents) add(ctx context.Context, cluster string, src source.Source) {
	go func() {
		select {
		case <-s.started:
		case <-ctx.Done():
			return
		}
		if err := src.Start(ctx, s.queue); err != nil {
			log.FromContext(ctx).Error(err, "Watch workload cluster", "cluster", cluster, "controller", s.name)
		}
	}()
}
