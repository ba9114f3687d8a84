package syncer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/ui"
	"github.com/petri-dev/petri/sync/webhook"
)

// served is a replica run as petri-sync runs it: its syncer and web page
// beside one HTTP server, stopped through api.Replica's sequence.
type served struct {
	*replica
	// stopping ends the replica as SIGTERM does; ran closes when Run has
	// returned, with its error in runErr.
	stopping context.CancelFunc
	ran      chan struct{}
	runErr   error
}

// serve starts a replica with the web page and waits until it is ready.
func (rs *replicas) serve(id string, delay time.Duration) *served {
	t := rs.h.t
	t.Helper()
	m := metrics.New()
	log := replicaLog(t, id)
	s := rs.newSyncer(id, env.Config, m, log)
	page, err := ui.New(ui.Options{Cache: s.Cache(), Namespace: rs.h.ns, Log: log})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/", api.Handler(s, &webhook.Handler{Secret: []byte(secret), Queue: s.Events(), Metrics: m}, m))
	page.Register(mux)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stopping := context.WithCancel(rs.h.ctx)
	r := &served{replica: &replica{id: id, s: s, m: m, url: "http://" + l.Addr().String()}, stopping: stopping, ran: make(chan struct{})}
	// As cmd/petri-sync wires them.
	rep := api.NewReplica(api.Server("", mux))
	rep.OnDrain(page.EndStreams)
	go func() {
		defer close(r.ran)
		r.runErr = rep.Run(ctx, l, api.RunOptions{Delay: delay, Log: log}, s.Start, page.Run)
	}()
	t.Cleanup(func() { stopping(); <-r.ran })
	require.Eventually(t, func() bool { return s.Ready() == nil }, 20*time.Second, 20*time.Millisecond, "replica %s not ready", id)
	return r
}

// openPage opens the page's event stream, as an open browser tab holds it;
// the channel closes when the replica ends the stream.
func (r *served) openPage(t *testing.T) (<-chan struct{}, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.url+ui.EventsPath, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("event stream: %s", resp.Status)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<22)
		for sc.Scan() {
		}
	}()
	return ended, nil
}

// ends reports whether a stream ends within d.
func ends(stream <-chan struct{}, d time.Duration) bool {
	select {
	case <-stream:
		return true
	case <-time.After(d):
		return false
	}
}

// A leader stops (SIGTERM) while a browser holds the web page's event
// stream open: the stream ends when the drain starts; a pull request opened
// during the drain is acted on; the replica stops acting, releases the
// Lease and is gone within about its drain delay and a second, and the
// follower leads at once.
func TestStoppingLeaderWithThePageOpenReleasesTheLease(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	h := rs.h
	const delay = 2 * time.Second
	a := rs.serve("sync-a", delay)
	rs.waitLeader(a.replica, 20*time.Second)
	b := rs.start("sync-b")
	page, err := a.openPage(t)
	require.NoError(t, err)

	began := wall.Now()
	a.stopping()
	require.Eventually(t, func() bool { return getJSON(t, a.url+"/readyz", nil) == http.StatusServiceUnavailable }, delay, 10*time.Millisecond, "draining")
	pr := openPR(t, h.gh, a.replica)
	assert.True(t, ends(page, delay/4), "the page's event stream was not ended by the drain")
	// A page that reconnects to it meanwhile gets the page and is let go
	// (not refused: a browser gives up on a stream refused once).
	again, err := a.openPage(t)
	if assert.NoError(t, err, "an event stream opened during the drain") {
		assert.True(t, ends(again, delay/4), "an event stream opened during the drain was held")
	}
	select {
	case <-a.ran:
	case <-time.After(delay + 20*time.Second):
		t.Fatal("the replica did not stop")
	}
	took := wall.Since(began)
	t.Logf("stopped %s after SIGTERM", took.Round(time.Millisecond))
	require.NoError(t, a.runErr)
	assert.Less(t, took, delay+time.Second, "stopped within the drain delay and a second")
	assert.NotEqual(t, "sync-a", rs.holder(), "the Lease was released before the replica was gone")

	// The pull request opened during the drain has its environment, from
	// the old leader before it let go or from the new one.
	h.waitEnv(envName(pr.Number), nil)
	rs.waitLeader(b, 5*time.Second)
}

// repositoryWrites fails a replica's writes of Repositories (its refresh
// marks) while refuse is set, as an API server that does not answer would.
func repositoryWrites(refuse *atomic.Bool) *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if refuse.Load() && r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/repositories") {
				return nil, errors.New("repositories refused")
			}
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A follower stops while a webhook it took waits in its memory to be
// recorded (the API server refused the refresh mark, and it waits to try
// again): it records the mark before it is gone, and the leader acts on
// the webhook.
func TestStoppingFollowerRecordsWhatItHolds(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	h := rs.h
	var refuse atomic.Bool
	_, b := rs.leaderAndFollower(func(id string) *replica { return rs.startWith(id, repositoryWrites(&refuse)) })
	// GitHub's listing does not show the pull request below: only the
	// mark names it to the leader, which then reads it on its own.
	h.gh.SetFault(&githubapi.Fault{EmptyList: true})

	refuse.Store(true)
	pr := openPR(t, h.gh, b)
	// Five tries: the next waits 3.2 s.
	require.Eventually(t, func() bool { return b.refreshes(t, "failed") >= 5 }, 15*time.Second, 10*time.Millisecond)
	refuse.Store(false)
	_, err := h.get(envName(pr.Number))
	require.True(t, apierrors.IsNotFound(err), "the leader knows nothing of the pull request yet: %v", err)
	b.stop(t)
	h.waitEnv(envName(pr.Number), nil)
	assert.Equal(t, 1.0, b.refreshes(t, "recorded"))
}
