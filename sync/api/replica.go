package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"
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

// Drain makes /readyz fail and returns after delay, while every other
// request is still answered; earlier if the server fails.
func (r *Replica) Drain(delay time.Duration) {
	r.stopping.Store(true)
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
	return r.srv.Shutdown(ctx)
}
