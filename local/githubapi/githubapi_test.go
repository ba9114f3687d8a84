package githubapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
)

func get(t *testing.T, s *githubapi.Server, path, token, etag string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, s.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// The stand-in answers as GitHub does where Petri depends on it: a request
// without an accepted token is refused, a listing carries an ETag, and a
// conditional request for an unchanged listing is a 304 that costs no rate
// limit, while a change makes the same ETag stale.
func TestConditionalListingsCostNothingUntilSomethingChanges(t *testing.T) {
	s := githubapi.New(githubapi.Options{Tokens: []string{"good"}})
	t.Cleanup(s.Close)
	s.OpenPullRequest("acme/shop", githubapi.PullRequest{Number: 1, Title: "one", HeadSHA: githubapi.SHA("1")})
	const pulls = "repos/acme/shop/pulls?state=open"

	assert.Equal(t, http.StatusUnauthorized, get(t, s, pulls, "bad", "").StatusCode)

	first := get(t, s, pulls, "good", "")
	require.Equal(t, http.StatusOK, first.StatusCode)
	var listed []map[string]any
	require.NoError(t, json.NewDecoder(first.Body).Decode(&listed))
	require.Len(t, listed, 1)
	assert.EqualValues(t, 1, listed[0]["number"])
	etag := first.Header.Get("ETag")
	require.NotEmpty(t, etag)

	before := s.RateLimitRemaining()
	unchanged := get(t, s, pulls, "good", etag)
	assert.Equal(t, http.StatusNotModified, unchanged.StatusCode)
	assert.Equal(t, before, s.RateLimitRemaining(), "a 304 costs no rate limit")

	s.OpenPullRequest("acme/shop", githubapi.PullRequest{Number: 2, Title: "two", HeadSHA: githubapi.SHA("2")})
	changed := get(t, s, pulls, "good", etag)
	assert.Equal(t, http.StatusOK, changed.StatusCode, "a new pull request makes the old ETag stale")
	assert.Equal(t, before-1, s.RateLimitRemaining(), "a 200 costs one request")
}

// A pull_request delivery is GitHub's published example payload with this
// server's pull request in it, signed the way GitHub signs.
func TestPullRequestDeliveryCarriesTheServersStateAndSignature(t *testing.T) {
	s := githubapi.New(githubapi.Options{Tokens: []string{"good"}})
	t.Cleanup(s.Close)
	pr := s.OpenPullRequest("acme/shop", githubapi.PullRequest{Number: 7, Title: "seven", HeadSHA: githubapi.SHA("7"), Labels: []string{"preview"}})

	d, err := s.PullRequestEvent("acme/shop", 7, "opened")
	require.NoError(t, err)
	assert.Equal(t, "pull_request", d.Event)
	var body struct {
		Action      string `json:"action"`
		PullRequest struct {
			Number int    `json:"number"`
			Title  string `json:"title"`
			Head   struct {
				SHA string `json:"sha"`
			} `json:"head"`
		} `json:"pull_request"`
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	require.NoError(t, json.Unmarshal(d.Body, &body))
	assert.Equal(t, "opened", body.Action)
	assert.Equal(t, 7, body.PullRequest.Number)
	assert.Equal(t, "seven", body.PullRequest.Title)
	assert.Equal(t, pr.HeadSHA, body.PullRequest.Head.SHA)
	assert.Equal(t, "acme/shop", body.Repository.FullName)

	sig := githubapi.Sign([]byte("secret"), d.Body)
	assert.Regexp(t, `^sha256=[0-9a-f]{64}$`, sig)
	assert.NotEqual(t, sig, githubapi.Sign([]byte("other"), d.Body), "the signature depends on the secret")
}

// Deliveries are built from a copy of the example payload parsed once:
// deliveries built at once, as make bench builds 50 a second, each carry
// their own pull request and repository.
func TestDeliveriesBuiltAtOnceDoNotShareThePayload(t *testing.T) {
	s := githubapi.New(githubapi.Options{Tokens: []string{"good"}})
	t.Cleanup(s.Close)
	const n = 16
	for i := range n {
		s.OpenPullRequest(fmt.Sprintf("acme/repo-%d", i), githubapi.PullRequest{Number: 1, Title: fmt.Sprint(i), HeadSHA: githubapi.SHA(fmt.Sprint(i))})
	}
	type delivery struct {
		PullRequest struct {
			Title string `json:"title"`
			Head  struct {
				SHA  string `json:"sha"`
				Repo struct {
					FullName string `json:"full_name"`
				} `json:"repo"`
			} `json:"head"`
		} `json:"pull_request"`
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	got := make([][]byte, n*20)
	var wg sync.WaitGroup
	for k := range got {
		wg.Go(func() {
			d, err := s.PullRequestEvent(fmt.Sprintf("acme/repo-%d", k%n), 1, "synchronize")
			if err == nil {
				got[k] = d.Body
			}
		})
	}
	wg.Wait()
	for k, body := range got {
		var d delivery
		require.NoError(t, json.Unmarshal(body, &d), "delivery %d", k)
		i := k % n
		assert.Equal(t, fmt.Sprint(i), d.PullRequest.Title, "delivery %d", k)
		assert.Equal(t, githubapi.SHA(fmt.Sprint(i)), d.PullRequest.Head.SHA, "delivery %d", k)
		assert.Equal(t, fmt.Sprintf("acme/repo-%d", i), d.Repository.FullName, "delivery %d", k)
		assert.Equal(t, fmt.Sprintf("acme/repo-%d", i), d.PullRequest.Head.Repo.FullName, "delivery %d", k)
	}
}
