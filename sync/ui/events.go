package ui

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// keepAlive is how often an idle event stream gets a comment line, so that
// proxies do not close it.
const keepAlive = 25 * time.Second

// hub hands the latest rendering to every open stream. A slow reader never
// holds the others up: it only ever gets the newest rendering.
type hub struct {
	max, perClient int

	mu      sync.Mutex
	version uint64
	latest  []byte
	subs    map[chan struct{}]string
	clients map[string]int
	closed  bool
}

func newHub(max, perClient int) *hub {
	return &hub{max: max, perClient: perClient, subs: map[chan struct{}]string{}, clients: map[string]int{}}
}

func (h *hub) publish(html []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if bytes.Equal(html, h.latest) {
		return
	}
	h.version++
	h.latest = bytes.Clone(html)
	for c := range h.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// errTooManyStreams and errTooManyFromClient say why a stream was not
// opened.
var (
	errTooManyStreams    = errors.New("too many open pages; try again later")
	errTooManyFromClient = errors.New("too many open pages from this address; close some")
)

// subscribe registers a stream of client (its address); an error when
// there are too many, in all or from that client, so that one client
// cannot lock the page out for everyone. A closed hub registers none and
// says so (closed).
func (h *hub) subscribe(client string) (c chan struct{}, closed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, true, nil
	case h.clients[client] >= h.perClient:
		return nil, false, errTooManyFromClient
	case len(h.subs) >= h.max:
		return nil, false, errTooManyStreams
	}
	c = make(chan struct{}, 1)
	h.subs[c] = client
	h.clients[client]++
	return c, false, nil
}

func (h *hub) unsubscribe(c chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	client, ok := h.subs[c]
	if !ok {
		return
	}
	delete(h.subs, c)
	if h.clients[client]--; h.clients[client] <= 0 {
		delete(h.clients, client)
	}
}

// open is the number of open streams.
func (h *hub) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (h *hub) current() (uint64, []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.version, h.latest
}

// close ends every stream.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.subs {
		close(c)
		delete(h.subs, c)
	}
	clear(h.clients)
}

// clientOf is the address a request comes from: the last address of
// Options.ClientAddressHeader (the one the proxy in front of sync added;
// earlier ones are the client's to choose), else the connection's.
func (u *UI) clientOf(r *http.Request) string {
	if name := u.opts.ClientAddressHeader; name != "" {
		if vs := r.Header.Values(name); len(vs) > 0 {
			last := vs[len(vs)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if a := strings.TrimSpace(last); a != "" {
				return a
			}
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// serveEvents streams the environments section: the current rendering at
// once (the page may have been rendered before a change), then each new
// one. Each event replaces the section. Once the streams are ended
// (EndStreams), a stream gets the current rendering and ends: the browser
// reconnects after the retry, to a replica that is not stopping.
func (u *UI) serveEvents(w http.ResponseWriter, r *http.Request) {
	c, ended, err := u.hub.subscribe(u.clientOf(r))
	switch {
	case errors.Is(err, errTooManyFromClient):
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case !ended:
		defer u.hub.unsubscribe(c)
	}
	rc := http.NewResponseController(w)
	// The server's write timeout is for requests, not for a stream: each
	// write gets its own, so that a client that stops reading gives its
	// place back instead of holding it for good.
	deadline := func() { _ = rc.SetWriteDeadline(time.Now().Add(u.opts.StreamWriteTimeout)) }
	deadline()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	var sent uint64
	send := func() error {
		v, html := u.hub.current()
		if v == 0 || v == sent {
			return nil
		}
		sent = v
		deadline()
		if err := writeEvent(w, "environments", strconv.FormatUint(v, 10), html); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(); err != nil {
		return
	}
	if err := rc.Flush(); err != nil || ended {
		return
	}
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case _, open := <-c:
			if !open {
				return
			}
			if err := send(); err != nil {
				return
			}
		case <-ping.C:
			deadline()
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// writeEvent writes one server-sent event; every line of data gets its own
// data field, which the browser joins with newlines again.
func writeEvent(w http.ResponseWriter, event, id string, data []byte) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\nid: %s\n", event, id)
	for _, line := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(bytes.TrimSuffix(line, []byte("\r")))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}
