package githubapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/local/githubapi"
)

// send makes one request as token and returns its status, Retry-After and
// message.
func send(t *testing.T, s *githubapi.Server, method, path, token string) (int, string, string) {
	t.Helper()
	var body *strings.Reader
	if method != http.MethodGet {
		body = strings.NewReader(`{"body":"x","state":"pending","context":"petri/shop"}`)
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(context.Background(), method, s.URL+strings.TrimPrefix(path, "/"), body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var e struct {
		Message string `json:"message"`
		Docs    string `json:"documentation_url"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode == http.StatusForbidden {
		assert.True(t, strings.HasSuffix(e.Docs, "secondary-rate-limits"), "documentation_url %q", e.Docs)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), e.Message
}

func status(path string) string { return "repos/acme/shop/statuses/" + githubapi.SHA(path) }

// GitHub's content-generating requests per minute, per identity: the 81st
// in a minute is refused with Retry-After and GitHub's message; every
// request of that identity before the Retry-After has passed is refused
// again and counted as a violation; another identity is not held; after
// the Retry-After the identity is served again.
func TestSecondaryLimitPerMinute(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	s := githubapi.New(githubapi.Options{Tokens: []string{"a", "b"}, Clock: clk})
	defer s.Close()
	s.OpenPullRequest("acme/shop", githubapi.PullRequest{Number: 1})

	for i := range githubapi.ContentRequestsPerMinute {
		code, _, _ := send(t, s, http.MethodPost, status("a"), "a")
		require.Equal(t, http.StatusCreated, code, "write %d", i+1)
		clk.Step(100 * time.Millisecond)
	}
	code, retry, msg := send(t, s, http.MethodPost, status("a"), "a")
	require.Equal(t, http.StatusForbidden, code)
	assert.Equal(t, githubapi.SecondaryRateLimitMessage, msg)
	secs, err := strconv.Atoi(retry)
	require.NoError(t, err)
	// The first write leaves the window a minute after it arrived.
	assert.Equal(t, 52, secs)
	assert.Empty(t, s.Violations(), "the refused request itself is no violation")

	code, _, _ = send(t, s, http.MethodPost, status("b"), "b")
	assert.Equal(t, http.StatusCreated, code, "another identity is not held")

	clk.Step(10 * time.Second)
	code, _, _ = send(t, s, http.MethodGet, "repos/acme/shop/pulls/1", "a")
	assert.Equal(t, http.StatusForbidden, code, "a read before the Retry-After is refused too")
	require.Len(t, s.Violations(), 1)
	assert.Equal(t, 42*time.Second, s.Violations()[0].Early)

	clk.Step(42 * time.Second)
	code, _, _ = send(t, s, http.MethodPost, status("a"), "a")
	assert.Equal(t, http.StatusCreated, code, "served again once the Retry-After passed")
	assert.Len(t, s.Violations(), 1)
	assert.Equal(t, 2, s.SecondaryRateLimited())
	assert.Equal(t, githubapi.ContentRequestsPerMinute+2, s.ContentRequests())
}

// And per hour: 500 content-generating requests in an hour, however slow
// each minute, then 403 until the oldest is an hour old.
func TestSecondaryLimitPerHour(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	s := githubapi.New(githubapi.Options{Tokens: []string{"a"}, Clock: clk})
	defer s.Close()
	for i := range githubapi.ContentRequestsPerHour {
		code, _, _ := send(t, s, http.MethodPost, status("a"), "a")
		require.Equal(t, http.StatusCreated, code, "write %d", i+1)
		clk.Step(time.Second) // 60 a minute, under the minute's limit
	}
	code, retry, _ := send(t, s, http.MethodPost, status("a"), "a")
	require.Equal(t, http.StatusForbidden, code)
	assert.Equal(t, strconv.Itoa(3600-githubapi.ContentRequestsPerHour), retry)
	code, _, _ = send(t, s, http.MethodGet, "repos/acme/shop/pulls", "a")
	assert.Equal(t, http.StatusForbidden, code)
	assert.Len(t, s.Violations(), 1)
	clk.Step(time.Duration(3600-githubapi.ContentRequestsPerHour) * time.Second)
	code, _, _ = send(t, s, http.MethodPost, status("a"), "a")
	assert.Equal(t, http.StatusCreated, code)
}

// No more than 100 requests of one identity at once.
func TestSecondaryLimitConcurrentRequests(t *testing.T) {
	s := githubapi.New(githubapi.Options{Tokens: []string{"a"}})
	defer s.Close()
	release := make(chan struct{})
	s.SetFault(&githubapi.Fault{Match: func(r *http.Request) bool {
		if r.URL.Query().Get("hold") == "" {
			return false
		}
		<-release
		return false
	}})
	var wg sync.WaitGroup
	for range githubapi.ConcurrentRequests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := send(t, s, http.MethodGet, "repos/acme/shop/pulls?hold=1", "a")
			assert.Equal(t, http.StatusOK, code)
		}()
	}
	// Each held request is recorded once answered; wait until all are in
	// by asking for the 101st until it is refused.
	require.Eventually(t, func() bool {
		code, _, _ := send(t, s, http.MethodGet, "repos/acme/shop/pulls", "a")
		return code == http.StatusForbidden
	}, 10*time.Second, 10*time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, 1, s.SecondaryRateLimited())
}
