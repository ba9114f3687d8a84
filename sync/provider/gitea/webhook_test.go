package gitea_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/sync/provider"
	giteaprovider "github.com/petri-dev/petri/sync/provider/gitea"
)

// delivery is one webhook delivery as the receiver saw it.
type delivery struct {
	kind, eventType string
	body            []byte
	signature       string
	verifyErr       error
}

type receiver struct {
	mu         sync.Mutex
	deliveries []delivery
}

func (rc *receiver) find(match func(giteaprovider.Event) bool) (delivery, giteaprovider.Event, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, d := range rc.deliveries {
		if d.verifyErr != nil {
			continue
		}
		ev, err := giteaprovider.ParseWebhook(d.kind, d.body)
		if err == nil && match(ev) {
			return d, ev, true
		}
	}
	return delivery{}, giteaprovider.Event{}, false
}

// A webhook sent by the real Gitea to a server on loopback is verified by
// the signature check and read into provider types.
func TestWebhookDeliveredByGitea(t *testing.T) {
	const hookRepo = "acme/hooks"
	secret := []byte("s3cret-for-the-hook")
	require.NoError(t, srv.CreateRepository(hookRepo))
	_, err := srv.Push(hookRepo, gitea.Commit{Branch: "main", Files: map[string]string{"README.md": "hooks\n"}})
	require.NoError(t, err)

	rc := &receiver{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := delivery{eventType: r.Header.Get("X-Gitea-Event-Type"), signature: r.Header.Get(giteaprovider.HeaderSignature)}
		d.kind, d.body, d.verifyErr = giteaprovider.ReadVerified(r, provider.WebhookSecrets{Default: secret}, 1<<20)
		rc.mu.Lock()
		rc.deliveries = append(rc.deliveries, d)
		rc.mu.Unlock()
		if d.verifyErr != nil {
			http.Error(w, d.verifyErr.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ts.Close()
	_, err = srv.CreateWebhook(hookRepo, gitea.Webhook{URL: ts.URL + "/webhook", Secret: string(secret)})
	require.NoError(t, err)

	sha, err := srv.Push(hookRepo, gitea.Commit{Branch: "feature", Files: map[string]string{"a.txt": "1"}})
	require.NoError(t, err)
	n, err := srv.OpenPullRequest(hookRepo, gitea.PullRequest{Head: "feature", Title: "WIP: hooked"})
	require.NoError(t, err)

	openedDelivery, opened := rc.await(t, "Gitea delivers pull_request opened", func(ev giteaprovider.Event) bool {
		return ev.Kind == giteaprovider.EventPullRequest && ev.Action == "opened" && ev.PullRequest.Number == n
	})
	assert.Equal(t, hookRepo, opened.Repository)
	assert.Equal(t, srv.Admin.Name, opened.Sender)
	pr := opened.PullRequest
	assert.Equal(t, hookRepo, pr.Repository)
	assert.Equal(t, "open", pr.State)
	assert.True(t, pr.Draft, "a WIP: title is a draft in the payload too")
	assert.Equal(t, "feature", pr.HeadBranch)
	assert.Equal(t, sha, pr.HeadSHA)
	assert.Equal(t, "main", pr.BaseBranch)
	assert.False(t, pr.Fork, "the repository's own branch, in the payload too")

	// The signature is the body's HMAC with this secret and no other.
	assert.True(t, giteaprovider.ValidSignature(secret, openedDelivery.body, openedDelivery.signature))
	assert.False(t, giteaprovider.ValidSignature([]byte("another secret"), openedDelivery.body, openedDelivery.signature))
	tampered := append([]byte{}, openedDelivery.body...)
	tampered[len(tampered)/2] ^= 1
	assert.False(t, giteaprovider.ValidSignature(secret, tampered, openedDelivery.signature))

	// A command from a reader on the pull request.
	require.NoError(t, srv.AddCollaborator(hookRepo, reader.Name, "read"))
	commentID, err := srv.Comment(&reader, hookRepo, n, "/petri redeploy")
	require.NoError(t, err)
	commentDelivery, commented := rc.await(t, "Gitea delivers issue_comment created", func(ev giteaprovider.Event) bool {
		return ev.Kind == giteaprovider.EventIssueComment && ev.Comment.ID == commentID
	})
	assert.Equal(t, "created", commented.Action)
	assert.True(t, commented.IsPull)
	assert.Equal(t, "pull_request_comment", commentDelivery.eventType)
	assert.Equal(t, "reader", commented.Sender)
	assert.Equal(t, "reader", commented.Comment.Author)
	assert.Equal(t, n, commented.Comment.Number)
	assert.Equal(t, "/petri redeploy", commented.Comment.Body)
	assert.False(t, commented.Comment.CreatedAt.IsZero())

	// A push to the branch, then the merge.
	sha2, err := srv.Push(hookRepo, gitea.Commit{Branch: "feature", Files: map[string]string{"a.txt": "2"}})
	require.NoError(t, err)
	rc.await(t, "Gitea delivers pull_request synchronized with the new head", func(ev giteaprovider.Event) bool {
		return ev.Kind == giteaprovider.EventPullRequest && ev.Action == "synchronized" && ev.PullRequest.HeadSHA == sha2
	})
	// Gitea merges no work in progress: the prefix goes first.
	require.NoError(t, srv.EditPullRequest(hookRepo, n, "hooked", ""))
	rc.await(t, "Gitea delivers pull_request edited, no longer a draft", func(ev giteaprovider.Event) bool {
		return ev.Kind == giteaprovider.EventPullRequest && ev.Action == "edited" && ev.PullRequest.Number == n && !ev.PullRequest.Draft
	})
	require.NoError(t, srv.MergePullRequest(hookRepo, n))
	rc.await(t, "Gitea delivers pull_request closed, merged", func(ev giteaprovider.Event) bool {
		return ev.Kind == giteaprovider.EventPullRequest && ev.Action == "closed" && ev.PullRequest.Number == n &&
			ev.PullRequest.Merged && ev.PullRequest.State == "closed"
	})

	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, d := range rc.deliveries {
		assert.NoError(t, d.verifyErr, "every delivery of Gitea's is signed with the secret")
	}
}

// await waits until a delivery matching match arrived, and returns it.
func (rc *receiver) await(t *testing.T, what string, match func(giteaprovider.Event) bool) (delivery, giteaprovider.Event) {
	t.Helper()
	var d delivery
	var ev giteaprovider.Event
	require.Eventually(t, func() bool {
		var ok bool
		d, ev, ok = rc.find(match)
		return ok
	}, 30*time.Second, 20*time.Millisecond, what)
	return d, ev
}

func TestReadVerifiedRefuses(t *testing.T) {
	secret := []byte("k")
	body := `{"action":"opened"}`
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(body))
	good := hex.EncodeToString(mac.Sum(nil))
	for name, tc := range map[string]struct {
		sig   string
		body  string
		limit int64
		want  error
	}{
		"good":         {sig: good, body: body, limit: 100},
		"missing":      {sig: "", body: body, limit: 100, want: giteaprovider.ErrBadSignature},
		"not hex":      {sig: "zz" + good[2:], body: body, limit: 100, want: giteaprovider.ErrBadSignature},
		"short":        {sig: good[:10], body: body, limit: 100, want: giteaprovider.ErrBadSignature},
		"github style": {sig: "sha256=" + good, body: body, limit: 100, want: giteaprovider.ErrBadSignature},
		"other body":   {sig: good, body: body + " ", limit: 100, want: giteaprovider.ErrBadSignature},
	} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(tc.body))
			r.Header.Set(giteaprovider.HeaderSignature, tc.sig)
			r.Header.Set(giteaprovider.HeaderEvent, "pull_request")
			kind, got, err := giteaprovider.ReadVerified(r, provider.WebhookSecrets{Default: secret}, tc.limit)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "pull_request", kind)
			assert.Equal(t, tc.body, string(got))
		})
	}
	r := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(body))
	r.Header.Set(giteaprovider.HeaderSignature, good)
	_, _, err := giteaprovider.ReadVerified(r, provider.WebhookSecrets{Default: secret}, 5)
	assert.ErrorContains(t, err, "over 5 bytes")
	assert.False(t, giteaprovider.ValidSignature(nil, []byte(body), good), "no secret validates nothing")
}

// countingBody counts the bytes read of a delivery's body.
type countingBody struct {
	r    io.Reader
	read int
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

// A delivery without a well-formed signature, or that says it is larger
// than the limit, is refused before a byte of its body is read: an
// unauthenticated sender cannot make sync read (and hold) 5 MiB per
// request.
func TestReadVerifiedRefusesBeforeReading(t *testing.T) {
	big := strings.Repeat("x", 5<<20)
	for name, tc := range map[string]struct {
		sig    string
		length int64
		want   string
	}{
		"no signature":            {sig: "", length: int64(len(big)), want: giteaprovider.ErrBadSignature.Error()},
		"malformed signature":     {sig: "sha256=abc", length: int64(len(big)), want: giteaprovider.ErrBadSignature.Error()},
		"says it is too large":    {sig: strings.Repeat("ab", 32), length: int64(len(big)), want: "over 1048576 bytes"},
		"no length, no signature": {sig: "", length: -1, want: giteaprovider.ErrBadSignature.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			body := &countingBody{r: strings.NewReader(big)}
			r := httptest.NewRequest(http.MethodPost, "/webhooks/gitea", body)
			r.ContentLength = tc.length
			r.Header.Set(giteaprovider.HeaderSignature, tc.sig)
			_, _, err := giteaprovider.ReadVerified(r, provider.WebhookSecrets{Default: []byte("k")}, 1<<20)
			assert.ErrorContains(t, err, tc.want)
			assert.Zero(t, body.read, "bytes read of the refused body")
		})
	}
}

func TestParseWebhookRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		kind, body string
	}{
		"unknown kind":       {"push", `{}`},
		"bad json":           {"pull_request", `{`},
		"no pull request":    {"pull_request", `{"action":"opened","repository":{"full_name":"a/b"}}`},
		"no repository":      {"pull_request", `{"action":"opened","pull_request":{"number":1}}`},
		"comment no comment": {"issue_comment", `{"action":"created","issue":{"number":1},"repository":{"full_name":"a/b"}}`},
		"comment no issue":   {"issue_comment", `{"action":"created","comment":{"id":1},"repository":{"full_name":"a/b"}}`},
	} {
		_, err := giteaprovider.ParseWebhook(tc.kind, []byte(tc.body))
		assert.Error(t, err, name)
	}
	_, err := giteaprovider.ParseWebhook("push", []byte(`{}`))
	assert.True(t, errors.Is(err, giteaprovider.ErrUnknownEvent))
}

func TestIsDraftTitle(t *testing.T) {
	for title, want := range map[string]bool{
		"WIP: cart":      true,
		"wip: cart":      true,
		"[WIP] cart":     true,
		"[wip]cart":      true,
		"WIP cart":       false,
		"cart WIP:":      false,
		"Draft: cart":    false,
		"":               false,
		"WI":             false,
		"[WIP":           false,
		"Wip: lowercase": true,
	} {
		assert.Equal(t, want, giteaprovider.IsDraftTitle(title), title)
	}
}
