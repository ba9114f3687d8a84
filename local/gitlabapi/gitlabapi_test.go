package gitlabapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/gitlabapi"
)

func get(t *testing.T, srv *gitlabapi.Server, token, path string) (*http.Response, []map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("PRIVATE-TOKEN", token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out []map[string]any
	if strings.HasPrefix(string(body), "[") {
		require.NoError(t, json.Unmarshal(body, &out))
	}
	return resp, out
}

// The stand-in finds a project by its escaped full path, pages as GitLab
// does, filters by updated_after, refuses unknown tokens and records every
// request.
func TestServer(t *testing.T) {
	srv := gitlabapi.New(gitlabapi.Options{Tokens: map[string]string{"tok": "bot"}})
	defer srv.Close()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	srv.SetNow(t0)
	srv.AddProject("a/b/c")
	for range 3 {
		srv.OpenMergeRequest("a/b/c", gitlabapi.MergeRequest{})
	}
	srv.Advance(time.Hour)
	srv.UpdateMergeRequest("a/b/c", 2, func(mr *gitlabapi.MergeRequest) { mr.Title = "touched" })

	resp, mrs := get(t, srv, "tok", "/api/v4/projects/a%2Fb%2Fc/merge_requests?per_page=2")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, mrs, 2)
	assert.Equal(t, "2", resp.Header.Get("X-Next-Page"))
	assert.Equal(t, "3", resp.Header.Get("X-Total"))
	assert.Equal(t, t0.Add(time.Hour).Format(http.TimeFormat), resp.Header.Get("Date"), "the server's clock")

	_, mrs = get(t, srv, "tok", "/api/v4/projects/a%2Fb%2Fc/merge_requests?updated_after="+t0.Add(time.Minute).Format(time.RFC3339))
	require.Len(t, mrs, 1)
	assert.Equal(t, "touched", mrs[0]["title"])

	resp, _ = get(t, srv, "", "/api/v4/projects/a%2Fb%2Fc/merge_requests")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = get(t, srv, "tok", "/api/v4/projects/a%2Fb/merge_requests")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	srv.RefuseNext(1, 7*time.Second)
	resp, _ = get(t, srv, "tok", "/api/v4/user")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "7", resp.Header.Get("Retry-After"))

	reqs := srv.Requests()
	require.Len(t, reqs, 5)
	assert.Equal(t, "/api/v4/projects/a%2Fb%2Fc/merge_requests", reqs[0].Path)
	assert.Equal(t, "2", reqs[0].Query.Get("per_page"))
	assert.Equal(t, http.StatusTooManyRequests, reqs[4].Status)
}
