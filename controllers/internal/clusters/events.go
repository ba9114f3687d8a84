package clusters

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Events is the one source through which a controller hears every
// workload cluster it is connected to. controller-runtime cannot remove a
// watch: a source given to Controller.Watch runs for the controller's life,
// so one per connection piled up with every change of a cluster's Secret,
// and a source whose cluster's cache was stopped before it synced waited
// for it for ever. Instead the controller watches this source once, and
// each connection starts its own sources with its own context and the
// controller's queue (Add): they end with the connection.
type Events struct {
	name    string
	once    sync.Once
	started chan struct{}
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// NewEvents is the source of the named controller.
func NewEvents(name string) *Events {
	return &Events{name: name, started: make(chan struct{})}
}

// Start is called once by the controller with its queue (source.Source).
func (s *Events) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.once.Do(func() {
		s.queue = q
		close(s.started)
	})
	return nil
}

func (s *Events) String() string { return "workload clusters' events for " + s.name }

// Add starts src for one connection, as soon as the controller has started
// (it may not have yet: the connection can come before the operator leads),
// and until ctx, the connection's, ends. It never blocks.
func (s *Events) Add(ctx context.Context, cluster string, src source.Source) {
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
