package stack

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is how a forge's API fails behind a FaultProxy.
type Fault struct {
	// Match selects the requests the fault concerns; all when nil.
	Match func(*http.Request) bool
	// Status answers the requests with this HTTP status and a JSON error
	// body, without asking the forge.
	Status int
	// RetryAfter, with Status, sends Retry-After (whole seconds): a 429 or
	// 403 rate limit.
	RetryAfter time.Duration
	// Delay holds a request back this long (or until the client gives
	// up) before anything else: a forge timing out.
	Delay time.Duration
	// EmptyList answers the requests it matches with an empty listing
	// (200, []), whatever Match says: a truncated listing. The others get
	// Delay and Status when Match selects them.
	EmptyList func(*http.Request) bool
	// Rewrite changes every request passed on to the forge: a forge
	// that answers, but not all it should.
	Rewrite func(*http.Request)
}

// FaultProxy stands between sync and a forge it cannot tell to fail (a
// real Gitea) or that should fail the same way (the GitLab stand-in): it
// passes every request on, unless a fault is set.
type FaultProxy struct {
	// URL is the proxy's root: sync is given it as the forge's URL.
	URL string

	srv   *http.Server
	l     net.Listener
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	fault *Fault
	seen  func(*http.Request)
	// requests counts every request the proxy received.
	requests atomic.Int64
}

// NewFaultProxy starts a proxy to target on a loopback port.
func NewFaultProxy(target string) (*FaultProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{URL: "http://" + l.Addr().String(), l: l, proxy: httputil.NewSingleHostReverseProxy(u)}
	p.proxy.Transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

// SetFault makes the forge fail as f says; nil restores it.
func (p *FaultProxy) SetFault(f *Fault) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// Watch calls seen with every request from now on (nil stops): what a
// test counts a forge's calls by.
func (p *FaultProxy) Watch(seen func(*http.Request)) {
	p.mu.Lock()
	p.seen = seen
	p.mu.Unlock()
}

// Requests is the number of requests received so far.
func (p *FaultProxy) Requests() int64 { return p.requests.Load() }

// Close stops the proxy.
func (p *FaultProxy) Close() {
	_ = p.srv.Close()
}

// ServeHTTP passes a request on or fails it.
func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	p.mu.Lock()
	f, seen := p.fault, p.seen
	p.mu.Unlock()
	if seen != nil {
		seen(r)
	}
	if f == nil {
		p.proxy.ServeHTTP(w, r)
		return
	}
	if f.EmptyList != nil && f.EmptyList(r) {
		emptyList(w)
		return
	}
	if f.Match != nil && !f.Match(r) {
		if f.Rewrite != nil {
			f.Rewrite(r)
		}
		p.proxy.ServeHTTP(w, r)
		return
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if f.Status != 0 {
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(f.RetryAfter/time.Second)))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Status)
		_, _ = fmt.Fprintf(w, "{\"message\":%q}\n", strconv.Itoa(f.Status)+" "+http.StatusText(f.Status))
		return
	}
	if f.Rewrite != nil {
		f.Rewrite(r)
	}
	p.proxy.ServeHTTP(w, r)
}

// emptyList answers a listing with nothing, as GitLab and Gitea write an
// empty page.
func emptyList(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("X-Total", "0")
	h.Set("X-Total-Count", "0")
	h.Set("X-Total-Pages", "1")
	h.Set("X-Page", "1")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("[]\n"))
}
