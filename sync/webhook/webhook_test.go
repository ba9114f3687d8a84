package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/webhook"
)

var key = []byte("k")

func post(h http.Handler, event, contentType string, body []byte, sig string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(string(body)))
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("Content-Type", contentType)
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestIssueCommentCommands(t *testing.T) {
	q := make(chan webhook.Event, 10)
	h := &webhook.Handler{Secret: key, Queue: q, Metrics: metrics.New()}
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	pr := srv.OpenPullRequest("acme/shop", githubapi.PullRequest{})
	cmd := srv.AddComment("acme/shop", pr.Number, "alice", "Please:\n/petri extend 3d")
	chat := srv.AddComment("acme/shop", pr.Number, "bob", "looks good")

	d, err := srv.IssueCommentEvent("acme/shop", pr.Number, cmd.ID)
	require.NoError(t, err)
	rec := post(h, d.Event, "application/json", d.Body, githubapi.Sign(key, d.Body))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	ev := <-q
	assert.Equal(t, "acme/shop", ev.Repository)
	require.NotNil(t, ev.Comment)
	assert.Equal(t, provider.Comment{ID: cmd.ID, Number: pr.Number, Author: "alice", Body: "Please:\n/petri extend 3d", CreatedAt: cmd.CreatedAt, UpdatedAt: cmd.UpdatedAt}, *ev.Comment)

	// A comment without a command, an edit and a comment on an issue are
	// nothing to do.
	d, err = srv.IssueCommentEvent("acme/shop", pr.Number, chat.ID)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, post(h, d.Event, "application/json", d.Body, githubapi.Sign(key, d.Body)).Code)
	d, err = srv.IssueCommentEvent("acme/shop", pr.Number, cmd.ID)
	require.NoError(t, err)
	for _, edit := range []func(string) string{
		func(b string) string { return strings.Replace(b, `"action":"created"`, `"action":"edited"`, 1) },
		func(b string) string { return strings.Replace(b, `"pull_request":{`, `"not_a_pull_request":{`, 1) },
	} {
		body := []byte(edit(string(d.Body)))
		require.NotEqual(t, d.Body, body)
		assert.Equal(t, http.StatusOK, post(h, d.Event, "application/json", body, githubapi.Sign(key, body)).Code)
	}
	assert.Empty(t, q)
}

func TestEventsFromGitHubPayloads(t *testing.T) {
	q := make(chan webhook.Event, 10)
	m := metrics.New()
	h := &webhook.Handler{Secret: key, Queue: q, Metrics: m}
	tests := []struct {
		event, action string
		check         func(webhook.Event)
	}{
		{"pull_request", "opened", func(e webhook.Event) {
			require.NotNil(t, e.PullRequest)
			assert.Equal(t, "Codertocat/Hello-World", e.Repository)
			assert.Equal(t, 2, e.PullRequest.Number)
			assert.Equal(t, "changes", e.PullRequest.HeadBranch)
			assert.Equal(t, "master", e.PullRequest.BaseBranch)
			assert.Equal(t, []string{"bug"}, e.PullRequest.Labels)
			assert.Equal(t, "Codertocat", e.PullRequest.Author)
			assert.True(t, e.PullRequest.Open())
		}},
		{"pull_request", "closed", func(e webhook.Event) { assert.False(t, e.PullRequest.Open()) }},
		{"check_run", "completed", func(e webhook.Event) {
			assert.Equal(t, provider.Gate{CheckRun: "Octocoders-linter"}, e.Gate)
			assert.Equal(t, provider.GatePassed, e.GateState)
			assert.Equal(t, "ec26c3e57ca3a959ca5aad62de7213c562f8c821", e.SHA)
		}},
		{"check_run", "created", func(e webhook.Event) { assert.Equal(t, provider.GatePending, e.GateState) }},
		{"status", "", func(e webhook.Event) {
			assert.Equal(t, provider.Gate{StatusContext: "default"}, e.Gate)
			assert.Equal(t, provider.GatePassed, e.GateState)
		}},
		{"push", "", func(e webhook.Event) {
			assert.Equal(t, "refs/tags/simple-tag", e.Ref)
			assert.Contains(t, e.CloneURLs, "https://github.com/Codertocat/Hello-World.git")
		}},
	}
	for _, tt := range tests {
		d, err := githubapi.Event(tt.event, tt.action)
		require.NoError(t, err)
		rec := post(h, d.Event, "application/json", d.Body, githubapi.Sign(key, d.Body))
		require.Equal(t, http.StatusAccepted, rec.Code, "%s %s: %s", tt.event, tt.action, rec.Body)
		ev := <-q
		assert.Equal(t, tt.event, ev.Type)
		tt.check(ev)
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(m.WebhookEvents.WithLabelValues("pull_request", "queued")))
}

func TestFormEncodedDelivery(t *testing.T) {
	q := make(chan webhook.Event, 1)
	h := &webhook.Handler{Secret: key, Queue: q}
	d, err := githubapi.Event("pull_request", "opened")
	require.NoError(t, err)
	body := []byte("payload=" + url.QueryEscape(string(d.Body)))
	rec := post(h, "pull_request", "application/x-www-form-urlencoded", body, githubapi.Sign(key, body))
	require.Equal(t, http.StatusAccepted, rec.Code)
	assert.Equal(t, 2, (<-q).PullRequest.Number)
}

func TestRejections(t *testing.T) {
	q := make(chan webhook.Event, 1)
	h := &webhook.Handler{Secret: key, Queue: q}
	d, err := githubapi.Event("pull_request", "opened")
	require.NoError(t, err)
	sig := githubapi.Sign(key, d.Body)
	assert.Equal(t, http.StatusUnauthorized, post(h, "pull_request", "application/json", d.Body, "").Code)
	assert.Equal(t, http.StatusUnauthorized, post(h, "pull_request", "application/json", d.Body, "sha256=zz").Code)
	assert.Equal(t, http.StatusUnauthorized, post(h, "pull_request", "application/json", d.Body, sig[:len(sig)-2]).Code)
	assert.Equal(t, http.StatusUnauthorized, post(&webhook.Handler{Queue: q}, "pull_request", "application/json", d.Body, githubapi.Sign(nil, d.Body)).Code, "no secret configured: nothing is accepted")
	bad := []byte(`{"number": "two"`)
	assert.Equal(t, http.StatusBadRequest, post(h, "pull_request", "application/json", bad, githubapi.Sign(key, bad)).Code)
	assert.Equal(t, http.StatusAccepted, post(h, "deployment", "application/json", bad, githubapi.Sign(key, bad)).Code, "unknown events are acknowledged and ignored")
	ping, err := githubapi.Event("ping", "")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, post(h, "ping", "application/json", ping.Body, githubapi.Sign(key, ping.Body)).Code)
	assert.Empty(t, q, "nothing rejected or ignored was queued")
	req := httptest.NewRequest(http.MethodGet, "/webhooks/github", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)

	assert.Equal(t, http.StatusAccepted, post(h, "pull_request", "application/json", d.Body, sig).Code)
	full := post(h, "pull_request", "application/json", d.Body, sig)
	assert.Equal(t, http.StatusServiceUnavailable, full.Code)
	assert.Equal(t, "5", full.Header().Get("Retry-After"))
}
