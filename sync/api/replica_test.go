package api_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/api"
)

// A stopping replica drains: /readyz fails while every other request,
// also on a connection kept alive from before, is still answered; then
// it accepts no connection and finishes the request in flight.
func TestReplicaDrainsThenFinishesWhatItStarted(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/webhooks/github", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		close(started)
		<-release
		w.WriteHeader(http.StatusOK)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := api.NewReplica(api.Server("", mux))
	r.Start(l)
	base := "http://" + l.Addr().String()
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	status := func(method, path string) int {
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status(http.MethodGet, "/readyz"))
	require.Equal(t, http.StatusAccepted, status(http.MethodPost, "/webhooks/github"), "a connection is now kept alive")

	const delay = 2 * time.Second
	drained := make(chan time.Time)
	began := time.Now()
	go func() {
		r.Drain(delay)
		drained <- time.Now()
	}()
	require.Eventually(t, func() bool { return status(http.MethodGet, "/readyz") == http.StatusServiceUnavailable }, delay, 10*time.Millisecond)
	assert.Equal(t, http.StatusAccepted, status(http.MethodPost, "/webhooks/github"), "webhooks are answered while draining")
	var slow int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		slow = status(http.MethodGet, "/slow")
	}()
	<-started
	assert.GreaterOrEqual(t, (<-drained).Sub(began), delay, "the drain lasts its delay")

	shut := make(chan error, 1)
	go func() { shut <- r.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	}, 5*time.Second, 10*time.Millisecond, "no connection is accepted once it shuts down")
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	require.NoError(t, <-shut)
	wg.Wait()
	assert.Equal(t, http.StatusOK, slow, "the request in flight was finished")
}
