package webhook_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/webhook"
)

// fakeSignature has the form of a real X-Hub-Signature-256 but is not the
// HMAC of anything sent here: the body has to be read before it can be
// refused for it.
var fakeSignature = "sha256=" + strings.Repeat("0", 64)

// filler is an endless body of n bytes that allocates nothing, so that the
// heap measured below is the server's.
type filler struct{ left int64 }

func (f *filler) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), f.left)
	for i := range p[:n] {
		p[i] = 'a'
	}
	f.left -= n
	return int(n), nil
}

// TestOversizedFloodKeepsTheHeapBounded sends 50 concurrent 25 MiB
// deliveries that are not signed with the secret, over loopback, once with
// a Content-Length and once chunked (the length unknown until read). Every
// one is refused, and the heap grows by far less than what was sent.
func TestOversizedFloodKeepsTheHeapBounded(t *testing.T) {
	const (
		senders = 50
		size    = 25 << 20
		// bound is what the heap may grow by: the default of 8 bodies of at
		// most 5 MiB read at once is 40 MiB, plus what the HTTP server and
		// the garbage collector's lag add.
		bound = 64 << 20
	)
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			m := metrics.New()
			srv := httptest.NewServer(&webhook.Handler{Secret: key, Queue: make(chan webhook.Event, 1), Metrics: m})
			defer srv.Close()
			client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: senders}}
			defer client.CloseIdleConnections()
			runtime.GC()
			runtime.GC() // and what sync.Pools kept from before
			var base runtime.MemStats
			runtime.ReadMemStats(&base)

			stop := make(chan struct{})
			peak := make(chan uint64)
			go func() {
				var m runtime.MemStats
				var max uint64
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					runtime.ReadMemStats(&m)
					max = maxOf(max, m.HeapInuse)
					select {
					case <-stop:
						peak <- max
						return
					case <-tick.C:
					}
				}
			}()

			codes := make([]int, senders)
			errs := make([]error, senders)
			var wg sync.WaitGroup
			for i := range senders {
				wg.Go(func() {
					req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/webhooks/github", &filler{left: size})
					if err != nil {
						errs[i] = err
						return
					}
					req.ContentLength = size
					if chunked {
						req.ContentLength = -1
					}
					req.Header.Set("X-GitHub-Event", "pull_request")
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Hub-Signature-256", fakeSignature)
					resp, err := client.Do(req)
					if err != nil {
						errs[i] = err
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					codes[i] = resp.StatusCode
				})
			}
			wg.Wait()
			close(stop)
			top := <-peak
			growth := int64(top) - int64(base.HeapInuse)
			t.Logf("heap in use: %d MiB before, %d MiB at the peak (%+d MiB) for %d × %d MiB sent", base.HeapInuse>>20, top>>20, growth>>20, senders, size>>20)
			// The server's own account: every delivery was refused, for its
			// size or because every reading slot was taken.
			refused := testutil.ToFloat64(m.WebhookEvents.WithLabelValues("pull_request", "too_large")) +
				testutil.ToFloat64(m.WebhookEvents.WithLabelValues("pull_request", "busy"))
			assert.Equal(t, float64(senders), refused, "deliveries refused by the server")
			// The senders' view: a 413 or 503, or, when the server closed the
			// connection while the sender was still writing the body it
			// refused, a reset.
			count := map[string]int{}
			for i := range senders {
				switch {
				case errs[i] != nil:
					assert.True(t, errors.Is(errs[i], syscall.ECONNRESET) || errors.Is(errs[i], syscall.EPIPE), "sender %d: %v", i, errs[i])
					count["reset while sending"]++
				default:
					assert.Contains(t, []int{http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable}, codes[i], "sender %d", i)
					count[http.StatusText(codes[i])]++
				}
			}
			t.Logf("answers: %v", count)
			assert.Less(t, growth, int64(bound), "the heap grew by %d MiB", growth>>20)
		})
	}
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// rawRequest writes a request head (and a partial body, if any) on its
// own connection and returns the connection, for requests whose body is
// never sent in full.
func rawRequest(t *testing.T, addr string, head map[string]string, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	var b strings.Builder
	b.WriteString("POST /webhooks/github HTTP/1.1\r\nHost: sync.test\r\nContent-Type: application/json\r\nX-GitHub-Event: pull_request\r\n")
	for k, v := range head {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	_, err = io.WriteString(conn, b.String())
	require.NoError(t, err)
	return conn
}

// readResponse reads the answer on a raw connection; it fails the test when
// none comes within ten seconds (the server is still waiting for the body).
func readResponse(t *testing.T, conn net.Conn) *http.Response {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(clock.RealClock{}.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer: the server is reading a body it should have refused")
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// A declared length over the limit is refused from the header alone: not
// one byte of the body is sent, and the answer still comes.
func TestContentLengthOverLimitIsRefusedBeforeReading(t *testing.T) {
	srv := httptest.NewServer(&webhook.Handler{Secret: key, Queue: make(chan webhook.Event, 1)})
	t.Cleanup(srv.Close) // after the connections, which close first
	conn := rawRequest(t, srv.Listener.Addr().String(), map[string]string{
		"X-Hub-Signature-256": fakeSignature,
		"Content-Length":      fmt.Sprint(25 << 20),
	}, "")
	assert.Equal(t, http.StatusRequestEntityTooLarge, readResponse(t, conn).StatusCode)
}

// A delivery without a signature header is refused before its body is read.
func TestMissingSignatureIsRefusedBeforeReading(t *testing.T) {
	srv := httptest.NewServer(&webhook.Handler{Secret: key, Queue: make(chan webhook.Event, 1)})
	t.Cleanup(srv.Close) // after the connections, which close first
	conn := rawRequest(t, srv.Listener.Addr().String(), map[string]string{"Content-Length": "1000"}, "{")
	assert.Equal(t, http.StatusUnauthorized, readResponse(t, conn).StatusCode)
}

// When every reading slot is taken by a body still arriving, the next
// delivery is answered 503 with Retry-After at once, not queued behind
// them; as soon as a slot frees, a signed delivery is accepted.
func TestSaturatedEndpointAnswers503AtOnce(t *testing.T) {
	q := make(chan webhook.Event, 1)
	m := metrics.New()
	h := &webhook.Handler{Secret: key, Queue: q, Metrics: m}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	var slow []net.Conn
	for range webhook.DefaultMaxConcurrent {
		slow = append(slow, rawRequest(t, addr, map[string]string{"X-Hub-Signature-256": fakeSignature, "Content-Length": "1000"}, `{"action":`))
	}
	require.Eventually(t, func() bool { return h.InFlight() == webhook.DefaultMaxConcurrent }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, float64(webhook.DefaultMaxConcurrent), testutil.ToFloat64(m.WebhookReadsInFlight))

	d, err := githubapi.Event("pull_request", "opened")
	require.NoError(t, err)
	resp, err := d.Send(context.Background(), nil, srv.URL+"/webhooks/github", key)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, webhook.RetryAfter, resp.Header.Get("Retry-After"))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.WebhookEvents.WithLabelValues("pull_request", "busy")))
	assert.Empty(t, q)

	// One slow sender gives up: its slot is free again.
	require.NoError(t, slow[0].Close())
	require.Eventually(t, func() bool { return h.InFlight() == webhook.DefaultMaxConcurrent-1 }, 10*time.Second, 5*time.Millisecond)
	resp, err = d.Send(context.Background(), nil, srv.URL+"/webhooks/github", key)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusAccepted, resp.StatusCode)
	assert.Equal(t, 2, (<-q).PullRequest.Number)
}

// A body that does not arrive within the read timeout frees its slot and
// is answered 408.
func TestSlowBodyTimesOut(t *testing.T) {
	h := &webhook.Handler{Secret: key, Queue: make(chan webhook.Event, 1), ReadTimeout: 100 * time.Millisecond}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	conn := rawRequest(t, srv.Listener.Addr().String(), map[string]string{"X-Hub-Signature-256": fakeSignature, "Content-Length": "1000"}, `{"action":`)
	assert.Equal(t, http.StatusRequestTimeout, readResponse(t, conn).StatusCode)
	assert.Equal(t, 0, h.InFlight())
}

// Limits set on the handler apply: a body one byte over MaxBody is refused
// whether its length is declared or not, one at the limit is read, checked
// and accepted when signed.
func TestMaxBodyBoundary(t *testing.T) {
	d, err := githubapi.Event("pull_request", "opened")
	require.NoError(t, err)
	limit := int64(len(d.Body))
	q := make(chan webhook.Event, 4)
	srv := httptest.NewServer(&webhook.Handler{Secret: key, Queue: q, MaxBody: limit})
	t.Cleanup(srv.Close)
	over := append(append([]byte{}, d.Body...), ' ')
	for _, tt := range []struct {
		name    string
		body    []byte
		chunked bool
		want    int
	}{
		{"at the limit", d.Body, false, http.StatusAccepted},
		{"at the limit, chunked", d.Body, true, http.StatusAccepted},
		{"one byte over", over, false, http.StatusRequestEntityTooLarge},
		{"one byte over, chunked", over, true, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(string(tt.body))
			if tt.chunked {
				body = io.MultiReader(body) // hides the length
			}
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/github", body)
			require.NoError(t, err)
			if tt.chunked {
				req.ContentLength = -1
			}
			req.Header.Set("X-GitHub-Event", "pull_request")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Hub-Signature-256", githubapi.Sign(key, tt.body))
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, tt.want, resp.StatusCode)
			if tt.want == http.StatusAccepted {
				assert.Equal(t, 2, (<-q).PullRequest.Number)
			}
		})
	}
}
