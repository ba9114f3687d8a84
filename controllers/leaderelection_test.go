package controllers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/controllers"
)

// The operator's leader keeps its Lease through renewals slower than the
// 5 s a request that controller-runtime's default timings (15 s lease, 10 s
// renew deadline, 2 s retry) allow: a proxy in front of kube-apiserver holds
// two Lease renewals in a row for 8 s each. With the old timings the same
// renewals make the leader give up its Lease and stop ("leader election
// lost"), which is what made the operator exit on a saturated API server.
func TestLeaderKeepsLeaseThroughSlowRenewals(t *testing.T) {
	const slowFor, slowRenewals = 8 * time.Second, 2
	for _, tc := range []struct {
		name                              string
		lease, renewDeadline, retryPeriod time.Duration
		lost                              bool
	}{
		{name: "controller-runtime's defaults", lease: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second, lost: true},
		{name: "the operator's defaults", lease: controllers.DefaultLeaseDuration, renewDeadline: controllers.DefaultRenewDeadline, retryPeriod: controllers.DefaultRetryPeriod},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns, err := env.CreateNamespace(ctx, "holdon")
			require.NoError(t, err)
			o := controllers.DefaultOptions()
			// A management namespace of its own: this manager reconciles
			// nothing of the other tests' while it leads.
			o.ManagementNamespace, o.SharedNamespace = ns, ns+"-shared"
			o.MetricsAddr, o.ProbeAddr = "0", "0"
			o.WorkloadClusters = false
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = tc.lease, tc.renewDeadline, tc.retryPeriod
			proxy := newSlowLeaseProxy(t, "/apis/coordination.k8s.io/v1/namespaces/"+ns+"/leases/"+o.LeaderElectionID)

			mgr, err := controllers.NewManager(&rest.Config{Host: proxy.url}, o)
			require.NoError(t, err)
			// The manager replaced the suite's operator's metrics collector.
			t.Cleanup(func() { restartOperator(t) })
			mctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			var stopped error
			go func() { defer close(done); stopped = mgr.Start(mctx) }()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			select {
			case <-mgr.Elected():
			case <-done:
				t.Fatalf("the manager stopped before it was elected: %v", stopped)
			case <-time.After(time.Minute):
				t.Fatal("the manager was not elected within a minute")
			}
			key := client.ObjectKey{Namespace: ns, Name: o.LeaderElectionID}
			var before coordinationv1.Lease
			require.NoError(t, env.Client.Get(ctx, key, &before))
			require.NotNil(t, before.Spec.HolderIdentity)

			proxy.slowDown(slowFor, slowRenewals)
			require.True(t, eventually(2*time.Minute, func() bool {
				select {
				case <-done:
					return true
				default:
				}
				// Both slow renewals answered, and a renewal after them.
				return proxy.renewed() >= slowRenewals+1
			}), "neither did the manager stop nor were %d slow renewals and one more answered", slowRenewals)
			if tc.lost {
				<-done
				require.ErrorContains(t, stopped, "leader election lost")
				return
			}
			select {
			case <-done:
				t.Fatalf("the manager stopped: %v", stopped)
			default:
			}
			var after coordinationv1.Lease
			require.NoError(t, env.Client.Get(ctx, key, &after))
			assert.Equal(t, *before.Spec.HolderIdentity, *after.Spec.HolderIdentity, "the Lease changed hands")
			assert.Equal(t, before.Spec.LeaseTransitions, after.Spec.LeaseTransitions)
			assert.True(t, after.Spec.RenewTime.After(before.Spec.RenewTime.Time), "the Lease was not renewed")
			select {
			case <-done:
				t.Fatalf("the manager stopped: %v", stopped)
			default:
			}
		})
	}
}

// slowLeaseProxy stands in front of kube-apiserver as a cluster
// administrator and holds the next Lease renewals (PUTs of one Lease) for a
// while before passing them on, as a saturated API server answers them late.
type slowLeaseProxy struct {
	url   string
	lease string
	next  http.Handler

	mu sync.Mutex
	// slow is how many renewals are still to be held, for how long.
	slow    int
	slowFor time.Duration
	// answered counts the renewals answered 200 since slowDown, held or not.
	answered int
	armed    bool
}

func newSlowLeaseProxy(t *testing.T, leasePath string) *slowLeaseProxy {
	t.Helper()
	upstream, err := url.Parse(env.Config.Host)
	require.NoError(t, err)
	transport, err := rest.TransportFor(env.Config)
	require.NoError(t, err)
	p := &slowLeaseProxy{lease: leasePath}
	p.next = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		Transport:     transport,
		FlushInterval: -1,
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// slowDown holds the next n renewals for d each.
func (p *slowLeaseProxy) slowDown(d time.Duration, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slow, p.slowFor, p.armed = n, d, true
}

// renewed is how many renewals were answered 200 since slowDown.
func (p *slowLeaseProxy) renewed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered
}

func (p *slowLeaseProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut || r.URL.Path != p.lease {
		p.next.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	var hold time.Duration
	if p.slow > 0 {
		p.slow--
		hold = p.slowFor
	}
	armed := p.armed
	p.mu.Unlock()
	if hold > 0 {
		select {
		case <-time.After(hold):
		case <-r.Context().Done():
			// The client gave up waiting: the renewal never reaches the
			// API server.
			return
		}
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	p.next.ServeHTTP(rec, r)
	if armed && rec.status == http.StatusOK && r.Context().Err() == nil {
		p.mu.Lock()
		p.answered++
		p.mu.Unlock()
	}
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets the proxy flush through the recorder.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
