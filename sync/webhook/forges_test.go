package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/webhook"
)

var giteaKey = []byte("gitea-secret")

func giteaSign(secret []byte, body string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// routed serves the handler as sync's mux does: GitHub's path and one per
// forge.
func routed(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/github", h)
	mux.Handle("POST /webhooks/{forge}", h)
	return mux
}

func postGitea(h http.Handler, path, kind, body, sig string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("X-Gitea-Event", kind)
	req.Header.Set("X-Gitea-Delivery", "d-1")
	req.Header.Set("Content-Type", "application/json")
	// Gitea sends GitHub's headers too.
	req.Header.Set("X-GitHub-Event", kind)
	if sig != "" {
		req.Header.Set("X-Gitea-Signature", sig)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

const giteaPullRequest = `{"action":"synchronized","number":3,
 "pull_request":{"number":3,"state":"open","title":"Add a greeting","html_url":"http://gitea/acme/shop/pulls/3",
  "user":{"login":"alice"},"head":{"ref":"feature/x","sha":"0123456789abcdef0123456789abcdef01234567"},"base":{"ref":"main"},
  "labels":[{"name":"preview"}],"updated_at":"2026-12-01T10:00:00Z"},
 "repository":{"full_name":"acme/shop"},"sender":{"login":"alice"}}`

func giteaComment(action, body string) string {
	return `{"action":"` + action + `","is_pull":true,
 "issue":{"number":3,"pull_request":{"merged":false}},
 "comment":{"id":77,"body":"` + body + `","user":{"login":"bob"},"created_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:00Z"},
 "repository":{"full_name":"acme/shop"},"sender":{"login":"bob"}}`
}

// TestGiteaDeliveries: Gitea's deliveries at /webhooks/gitea are checked
// with Gitea's secret and become the events GitHub's become, marked with
// their forge.
func TestGiteaDeliveries(t *testing.T) {
	q := make(chan webhook.Event, 10)
	m := metrics.New()
	h := routed(&webhook.Handler{Secret: key, Queue: q, Metrics: m,
		Forges: map[string]webhook.Forge{"gitea": webhook.Gitea("gitea", giteaKey, nil)}})

	rec := postGitea(h, "/webhooks/gitea", "pull_request", giteaPullRequest, giteaSign(giteaKey, giteaPullRequest))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	ev := <-q
	assert.Equal(t, "pull_request", ev.Type)
	assert.Equal(t, "gitea", ev.Forge)
	assert.Equal(t, "acme/shop", ev.Repository)
	assert.Equal(t, "d-1", ev.Delivery)
	require.NotNil(t, ev.PullRequest)
	assert.Equal(t, 3, ev.PullRequest.Number)
	assert.Equal(t, "0123456789abcdef0123456789abcdef01234567", ev.SHA)
	assert.Equal(t, []string{"preview"}, ev.PullRequest.Labels)
	assert.Equal(t, 1.0, testutil.ToFloat64(m.WebhookEvents.WithLabelValues("gitea:pull_request", "queued")))

	cmd := giteaComment("created", "/petri redeploy")
	rec = postGitea(h, "/webhooks/gitea", "issue_comment", cmd, giteaSign(giteaKey, cmd))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	ev = <-q
	assert.Equal(t, "issue_comment", ev.Type)
	require.NotNil(t, ev.Comment)
	assert.Equal(t, int64(77), ev.Comment.ID)
	assert.Equal(t, 3, ev.Comment.Number)
	assert.Equal(t, "bob", ev.Comment.Author)

	for name, body := range map[string]string{
		"chat":   giteaComment("created", "looks good"),
		"edited": giteaComment("edited", "/petri redeploy"),
	} {
		rec = postGitea(h, "/webhooks/gitea", "issue_comment", body, giteaSign(giteaKey, body))
		assert.Equal(t, http.StatusAccepted, rec.Code, name)
		assert.Contains(t, rec.Body.String(), "ignored", name)
	}
	push := `{"ref":"refs/heads/main"}`
	rec = postGitea(h, "/webhooks/gitea", "push", push, giteaSign(giteaKey, push))
	assert.Equal(t, http.StatusAccepted, rec.Code)
	assert.Equal(t, 1.0, testutil.ToFloat64(m.WebhookEvents.WithLabelValues("gitea:other", "ignored")))
	assert.Empty(t, q, "nothing else was queued")
}

// TestGiteaRefusals: a wrong signature (GitHub's secret, or none), a forge
// sync does not serve, a Gitea delivery at GitHub's path, a malformed
// payload and a body over the limit are all refused, and nothing is
// queued.
func TestGiteaRefusals(t *testing.T) {
	q := make(chan webhook.Event, 10)
	h := routed(&webhook.Handler{Secret: key, Queue: q, Metrics: metrics.New(), MaxBody: 4096,
		Forges: map[string]webhook.Forge{"gitea": webhook.Gitea("gitea", giteaKey, nil)}})
	big := `{"pad":"` + strings.Repeat("x", 5000) + `"}`
	bad := `{"action":"opened","pull_request":{"number":0},"repository":{"full_name":"acme/shop"}}`
	tests := []struct {
		name, path, body, sig string
		want                  int
	}{
		{"signed with GitHub's secret", "/webhooks/gitea", giteaPullRequest, giteaSign(key, giteaPullRequest), http.StatusUnauthorized},
		{"unsigned", "/webhooks/gitea", giteaPullRequest, "", http.StatusUnauthorized},
		{"forge not served", "/webhooks/forgejo", giteaPullRequest, giteaSign(giteaKey, giteaPullRequest), http.StatusNotFound},
		{"at GitHub's path", "/webhooks/github", giteaPullRequest, giteaSign(giteaKey, giteaPullRequest), http.StatusBadRequest},
		{"malformed", "/webhooks/gitea", bad, giteaSign(giteaKey, bad), http.StatusBadRequest},
		{"too large", "/webhooks/gitea", big, giteaSign(giteaKey, big), http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := postGitea(h, tt.path, "pull_request", tt.body, tt.sig)
			assert.Equal(t, tt.want, rec.Code, rec.Body.String())
		})
	}
	assert.Empty(t, q)
}

// gitlabPayload is one of GitLab's example payloads, as the client
// library's module ships them.
func gitlabPayload(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "gitlab.com/gitlab-org/api/client-go").Output()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "testdata", "webhooks", name))
	require.NoError(t, err)
	return string(data)
}

func postGitLab(h http.Handler, kind, body, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/gitlab", strings.NewReader(body))
	req.Header.Set("X-Gitlab-Event", kind)
	req.Header.Set("X-Gitlab-Token", token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestGitLabDeliveries: GitLab's example hooks at /webhooks/gitlab, checked
// by X-Gitlab-Token, queue their project (by its full path) as hints; a
// wrong token is refused.
func TestGitLabDeliveries(t *testing.T) {
	q := make(chan webhook.Event, 10)
	token := []byte("gitlab-token")
	h := routed(&webhook.Handler{Queue: q, Metrics: metrics.New(), Forges: map[string]webhook.Forge{"gitlab": webhook.GitLab(token, nil)}})

	mr := gitlabPayload(t, "merge_request.json")
	rec := postGitLab(h, "Merge Request Hook", mr, string(token))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	ev := <-q
	assert.Equal(t, webhook.Event{Type: "pull_request", Forge: "gitlab", Repository: "gitlabhq/gitlab-test", Received: ev.Received}, ev)

	note := strings.Replace(gitlabPayload(t, "note_merge_request.json"), "This MR needs work.", "/petri redeploy", 1)
	rec = postGitLab(h, "Note Hook", note, string(token))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	ev = <-q
	assert.Equal(t, "issue_comment", ev.Type)
	require.NotNil(t, ev.Comment)
	assert.Equal(t, "/petri redeploy", ev.Comment.Body)

	rec = postGitLab(h, "Pipeline Hook", gitlabPayload(t, "pipeline.json"), string(token))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	assert.Equal(t, "pipeline", (<-q).Type)

	rec = postGitLab(h, "Merge Request Hook", mr, "wrong")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Empty(t, q)
}

// TestOneIntakeForEveryForge: GitHub is one more forge behind the one
// intake. Given among the forges it is served at its path without the
// handler's own secret, and every forge's delivery meets the same
// refusals before its body is read: another method than POST, no secret,
// and no credential that may be right.
func TestOneIntakeForEveryForge(t *testing.T) {
	q := make(chan webhook.Event, 10)
	m := metrics.New()
	token := []byte("gitlab-token")
	h := &webhook.Handler{Queue: q, Metrics: m, Forges: map[string]webhook.Forge{
		"github": webhook.GitHub(key, nil),
		"gitea":  webhook.Gitea("gitea", giteaKey, nil),
		"gitlab": webhook.GitLab(token, nil),
	}}
	d, err := githubapi.Event("pull_request", "opened")
	require.NoError(t, err)
	rec := post(routed(h), d.Event, "application/json", d.Body, githubapi.Sign(key, d.Body))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	assert.Equal(t, 2, (<-q).PullRequest.Number)
	assert.Equal(t, 1.0, testutil.ToFloat64(m.WebhookEvents.WithLabelValues("pull_request", "queued")), "GitHub's events are counted by their bare names")

	deliver := func(method, forge string, header map[string]string, body string) int {
		req := httptest.NewRequest(method, "/webhooks/"+forge, strings.NewReader(body))
		req.SetPathValue("forge", forge)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	signed := map[string]map[string]string{
		"github": {"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": githubapi.Sign(key, d.Body)},
		"gitea":  {"X-Gitea-Event": "pull_request", "X-Gitea-Signature": giteaSign(giteaKey, string(d.Body))},
		"gitlab": {"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": string(token)},
	}
	unsigned := map[string]map[string]string{
		"github": {"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": "sha256=beef"},
		"gitea":  {"X-Gitea-Event": "pull_request", "X-Gitea-Signature": "beef"},
		"gitlab": {"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": "wrong"},
	}
	for forge := range signed {
		assert.Equal(t, http.StatusMethodNotAllowed, deliver(http.MethodGet, forge, signed[forge], string(d.Body)), forge)
		assert.Equal(t, http.StatusUnauthorized, deliver(http.MethodPost, forge, unsigned[forge], string(d.Body)), forge)
	}
	bare := &webhook.Handler{Queue: q, Forges: map[string]webhook.Forge{"gitea": webhook.Gitea("gitea", nil, nil)}}
	for _, forge := range []string{"github", "gitea"} {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/"+forge, strings.NewReader(string(d.Body)))
		req.SetPathValue("forge", forge)
		for k, v := range signed[forge] {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		bare.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusUnauthorized, rec.Code, "%s without a secret", forge)
	}
	assert.Empty(t, q)
}
