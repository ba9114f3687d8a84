package ui_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/ui"
)

// sse reads server-sent events.
type sse struct {
	events chan string
	resp   *http.Response
}

func openEvents(t *testing.T) *sse {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, server.URL+ui.EventsPath, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sse{events: make(chan string, 64), resp: resp}
	go s.read(resp.Body)
	t.Cleanup(func() { resp.Body.Close() })
	return s
}

// read turns the stream into events until it ends.
func (s *sse) read(body io.Reader) {
	defer close(s.events)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		case line == "" && data != nil:
			s.events <- strings.Join(data, "\n")
			data = nil
		}
	}
}

// next waits at most d for an event that contains want.
func (s *sse) next(t *testing.T, d time.Duration, want string) string {
	t.Helper()
	return s.until(t, d, want, func(ev string) bool { return strings.Contains(ev, want) })
}

// until waits at most d for an event that satisfies ok.
func (s *sse) until(t *testing.T, d time.Duration, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev, open := <-s.events:
			require.True(t, open, "the stream ended")
			if ok(ev) {
				return ev
			}
		case <-deadline:
			require.FailNowf(t, "no event in time", "no event with %s within %s", what, d)
		}
	}
}

// Every open page gets each change within a second: a new environment, a
// new phase, a deletion.
func TestEventsCarryEachChange(t *testing.T) {
	streams := []*sse{openEvents(t), openEvents(t), openEvents(t)}
	e := syncEnvironment("shop-pr-9-bbbb", 9, greeter("web"))
	create(t, e)
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), e) })
	for _, s := range streams {
		s.next(t, time.Second, `id="env-shop-pr-9-bbbb" data-phase="Pending"`)
	}
	setStatus(t, e.Name, func(s *petriv1.EphemeralEnvironmentStatus) {
		s.Phase = petriv1.EnvironmentReady
		s.Components = []petriv1.ComponentStatus{{Name: "web", Phase: petriv1.ComponentDeployed, Job: "shop-pr-9-web"}}
	})
	for _, s := range streams {
		s.next(t, time.Second, `id="env-shop-pr-9-bbbb" data-phase="Ready"`)
	}
	require.NoError(t, cluster.Client.Delete(context.Background(), e))
	for _, s := range streams {
		s.until(t, time.Second, "the environment gone", func(ev string) bool { return !strings.Contains(ev, "shop-pr-9-bbbb") })
	}
}

// An event stream outlives the server's read and write timeouts (30 s in
// petri-sync): they are for requests, and a page keeps its stream open for
// as long as it is shown. Here both timeouts are 300 ms and the change comes
// after a second.
func TestEventStreamOutlivesServerTimeouts(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/", server.Config.Handler)
	short := httptest.NewUnstartedServer(mux)
	short.Config.ReadTimeout, short.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	short.Start()
	defer short.Close()
	resp, err := http.Get(short.URL + ui.EventsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	s := &sse{events: make(chan string, 64), resp: resp}
	go s.read(resp.Body)
	s.next(t, 5*time.Second, `<h2 id="envs-title">`)

	// Past both timeouts: the point of this test is the wait.
	time.Sleep(time.Second)
	e := syncEnvironment("shop-pr-13-eeee", 13, greeter("web"))
	create(t, e)
	t.Cleanup(func() { _ = cluster.Client.Delete(context.Background(), e) })
	s.next(t, 2*time.Second, `id="env-shop-pr-13-eeee"`)
}
