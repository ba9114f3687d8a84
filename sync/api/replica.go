package api

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Replica runs one replica's HTTP server and stops it the way a pod
// behind a Service and an ingress controller should stop: first it drains
// (every request is still answered, /readyz says 503, and whoever still
// routes here has time to see the pod leave), then it stops accepting
// connections and finishes the requests in flight. Dropping connections
// the moment the pod is deleted loses the webhooks already on their way.
type Replica struct {
	srv      *http.Server
	stopping atomic.Bool
	errc     chan error
	onDrain  []func()
	drained  sync.Once
}

// NewReplica wraps srv's handler: /readyz answers 503 once draining.
func NewReplica(srv *http.Server) *Replica {
	r := &Replica{srv: srv, errc: make(chan error, 1)}
	next := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/readyz" && r.stopping.Load() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, req)
	})
	return r
}

// Start serves on l until Shutdown.
func (r *Replica) Start(l net.Listener) {
	go func() {
		if err := r.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.errc <- err
		}
	}()
}

// Err reports the server failing.
func (r *Replica) Err() <-chan error { return r.errc }

// OnDrain has f called once when the replica starts to drain (or shuts
// down without a drain): what holds a connection open for good (the web
// page's event streams) ends then, or the shutdown would wait for it in
// vain. Call it before Start.
func (r *Replica) OnDrain(f func()) { r.onDrain = append(r.onDrain, f) }

func (r *Replica) draining() {
	r.stopping.Store(true)
	r.drained.Do(func() {
		for _, f := range r.onDrain {
			f()
		}
	})
}

// Drain makes /readyz fail and returns after delay, while every other
// request is still answered; earlier if the server fails.
func (r *Replica) Drain(delay time.Duration) {
	r.draining()
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case err := <-r.errc:
		r.errc <- err
	}
}

// Shutdown stops accepting connections and waits, within ctx, for the
// requests in flight to finish.
func (r *Replica) Shutdown(ctx context.Context) error {
	r.draining()
	return r.srv.Shutdown(ctx)
}

// Bounds of a replica's stop after its drain, when RunOptions leave them
// zero: a webhook body may take 10 s to read (webhook.DefaultReadTimeout),
// and a leader's work stops at once and its Lease is released in one
// request. With the drain's 5 s that is 20 s; terminationGracePeriodSeconds
// leaves 5 s more.
const (
	DefaultRequestsTimeout = 10 * time.Second
	DefaultWorkersTimeout  = 5 * time.Second
)

// RunOptions say how a replica stops.
type RunOptions struct {
	// Delay is how long it drains.
	Delay time.Duration
	// RequestsTimeout bounds finishing the requests in flight once the
	// port is closed, WorkersTimeout the workers' stop after that (the
	// leader's work, then its Lease); each has time of its own.
	RequestsTimeout, WorkersTimeout time.Duration
	Log                             logr.Logger
}

// Run serves on l and runs the workers (the syncer, the page's renderer)
// until ctx ends (SIGTERM) or one of them fails; then it drains (ends what
// OnDrain named), closes the port and finishes the requests in flight,
// and only then stops the workers and waits for them: a leader releases
// its Lease before the process ends, so that another replica takes over
// at once.
func (r *Replica) Run(ctx context.Context, l net.Listener, o RunOptions, workers ...func(context.Context) error) error {
	// The workers stop after the server: the webhooks a draining replica
	// accepts are still acted on or handed over.
	wctx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	errc := make(chan error, len(workers))
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := w(wctx); err != nil {
				errc <- err
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	r.Start(l)
	var err error
	select {
	case <-ctx.Done():
		o.Log.Info("Stopping: answering for a while before closing the port", "delay", o.Delay)
		r.Drain(o.Delay)
	case err = <-errc:
	case err = <-r.Err():
	}
	requests, workersTimeout := cmp.Or(o.RequestsTimeout, DefaultRequestsTimeout), cmp.Or(o.WorkersTimeout, DefaultWorkersTimeout)
	shutdown, cancel := context.WithTimeout(context.Background(), requests)
	defer cancel()
	if serr := r.Shutdown(shutdown); serr != nil {
		o.Log.Error(serr, "Requests in flight not finished; closing them", "timeout", requests)
		_ = r.srv.Close()
	}
	stopWorkers()
	t := time.NewTimer(workersTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		o.Log.Info("Stopping: the work did not stop in time; exiting all the same", "timeout", workersTimeout)
	}
	return err
}
