package ui

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One rendering reaches every open page; a page that does not read holds
// nobody up and later gets only the newest rendering; the number of open
// pages is bounded.
func TestHubHandsTheNewestRenderingToEveryStream(t *testing.T) {
	h := newHub(100, 100)
	var subs []chan struct{}
	for range 100 {
		c, _, err := h.subscribe(fmt.Sprintf("10.0.0.%d", len(subs)))
		require.NoError(t, err)
		subs = append(subs, c)
	}
	_, closed, err := h.subscribe("10.0.1.1")
	assert.ErrorIs(t, err, errTooManyStreams, "the 101st stream is refused")
	assert.False(t, closed)

	h.publish([]byte("one"))
	for _, c := range subs {
		require.Len(t, c, 1, "every stream is told once")
		<-c
	}
	h.publish([]byte("one"))
	for _, c := range subs {
		assert.Empty(t, c, "an unchanged rendering is not sent again")
	}
	for _, page := range []string{"two", "three", "four"} {
		h.publish([]byte(page))
	}
	v, html := h.current()
	assert.Equal(t, uint64(4), v)
	assert.Equal(t, "four", string(html))
	for _, c := range subs {
		assert.Len(t, c, 1, "a slow stream has one wake-up waiting, for the newest rendering")
	}

	h.unsubscribe(subs[0])
	h.unsubscribe(subs[0])
	_, _, err = h.subscribe("10.0.1.1")
	assert.NoError(t, err, "a closed stream frees its place (once)")
	_, _, err = h.subscribe("10.0.1.2")
	assert.ErrorIs(t, err, errTooManyStreams)
	h.close()
	<-subs[1] // the wake-up that was waiting
	_, open := <-subs[1]
	assert.False(t, open, "closing the hub ends every stream")
	_, closed, err = h.subscribe("10.0.1.3")
	assert.NoError(t, err)
	assert.True(t, closed, "a stream opened after is told the hub is closed, not full")
}

// One client's streams are bounded apart from the others': a client at
// its bound is refused while others still open theirs, and a stream it
// closes gives it its place back.
func TestHubBoundsTheStreamsOfOneClient(t *testing.T) {
	h := newHub(10, 3)
	var mine []chan struct{}
	for range 3 {
		c, _, err := h.subscribe("192.0.2.7")
		require.NoError(t, err)
		mine = append(mine, c)
	}
	_, _, err := h.subscribe("192.0.2.7")
	assert.ErrorIs(t, err, errTooManyFromClient)
	for range 3 {
		_, _, err := h.subscribe("192.0.2.8")
		assert.NoError(t, err, "another client opens its own")
	}
	h.unsubscribe(mine[0])
	_, _, err = h.subscribe("192.0.2.7")
	assert.NoError(t, err)
}

// A client is the connection's address, or the last address of the
// header a trusted proxy sets: the addresses before it are the client's to
// choose, so they never count.
func TestClientOfARequest(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		values       []string
		want         string
	}{
		{name: "the connection without a header named", values: []string{"198.51.100.9"}, want: "192.0.2.1"},
		{name: "the connection when the header is absent", header: "X-Forwarded-For", want: "192.0.2.1"},
		{name: "the proxy's address", header: "X-Forwarded-For", values: []string{"198.51.100.9"}, want: "198.51.100.9"},
		{name: "the last of a list", header: "X-Forwarded-For", values: []string{"203.0.113.5, 198.51.100.9"}, want: "198.51.100.9"},
		{name: "the last of several headers", header: "X-Forwarded-For", values: []string{"203.0.113.5", "10.1.2.3,198.51.100.9 "}, want: "198.51.100.9"},
		{name: "the connection when the last is empty", header: "X-Real-Ip", values: []string{"203.0.113.5,"}, want: "192.0.2.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &UI{opts: Options{ClientAddressHeader: tc.header}}
			r := httptest.NewRequest(http.MethodGet, EventsPath, nil)
			r.RemoteAddr = "192.0.2.1:53122"
			name := tc.header
			if name == "" {
				name = "X-Forwarded-For"
			}
			for _, v := range tc.values {
				r.Header.Add(name, v)
			}
			assert.Equal(t, tc.want, u.clientOf(r))
		})
	}
}

// A client at its bound is answered 429 (it is the one to close pages), a
// page full for all 503 (everyone waits), and the bound follows the
// proxy's address, not what the client wrote before it.
func TestEventsRefuseAClientAtItsBound(t *testing.T) {
	u := &UI{opts: Options{ClientAddressHeader: "X-Forwarded-For"}, hub: newHub(3, 2)}
	for range 2 {
		_, _, err := u.hub.subscribe("198.51.100.9")
		require.NoError(t, err)
	}
	status := func(xff string) int {
		r := httptest.NewRequest(http.MethodGet, EventsPath, nil)
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		u.serveEvents(w, r)
		return w.Code
	}
	assert.Equal(t, http.StatusTooManyRequests, status("203.0.113.5, 198.51.100.9"))
	assert.Equal(t, http.StatusTooManyRequests, status("203.0.113.77, 198.51.100.9"), "a new first address is no new client")
	_, _, err := u.hub.subscribe("198.51.100.10")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, status("198.51.100.11"), "all taken")
}

// A client that stops reading its stream gives its place back once a
// write to it has waited StreamWriteTimeout, rather than holding it for
// good.
func TestEventStreamOfAClientThatStopsReadingEnds(t *testing.T) {
	u := &UI{opts: Options{StreamWriteTimeout: 200 * time.Millisecond}, hub: newHub(4, 4)}
	srv := httptest.NewServer(http.HandlerFunc(u.serveEvents))
	defer srv.Close()
	defer u.hub.close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: page\r\n\r\n", EventsPath)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return u.hub.open() == 1 }, 5*time.Second, 10*time.Millisecond)

	// The client reads nothing; renderings pile up in the connection's
	// buffers until a write blocks, and then its deadline ends the stream.
	big := bytes.Repeat([]byte("x"), 1<<20)
	n := 0
	require.Eventually(t, func() bool {
		n++
		big[0] = byte('a' + n%26) // a new rendering each time
		u.hub.publish(big)
		return u.hub.open() == 0
	}, 20*time.Second, 20*time.Millisecond, "the stream of a client that reads nothing stays open")
}
