package gitlab_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/provider"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
)

var secret = []byte("s3cret-hook-token")

// payload is one of GitLab's example payloads (testdata/), with edit
// applied to its JSON to play another action of the same hook.
func payload(t *testing.T, name string, edit func(p map[string]any)) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	require.NoError(t, err)
	var p map[string]any
	require.NoError(t, json.Unmarshal(raw, &p))
	if edit != nil {
		edit(p)
	}
	out, err := json.Marshal(p)
	require.NoError(t, err)
	return out
}

func attrs(p map[string]any) map[string]any { return p["object_attributes"].(map[string]any) }

// deliver plays a delivery through ReadVerified and ParseWebhook as sync's
// handler does.
func deliver(t *testing.T, kind string, body []byte) glprovider.Event {
	t.Helper()
	r := httptest.NewRequest("POST", "/webhooks/gitlab", strings.NewReader(string(body)))
	r.Header.Set(glprovider.HeaderEvent, kind)
	r.Header.Set(glprovider.HeaderToken, string(secret))
	gotKind, got, err := glprovider.ReadVerified(r, provider.WebhookSecrets{Default: secret}, 1<<20)
	require.NoError(t, err)
	ev, err := glprovider.ParseWebhook(gotKind, got)
	require.NoError(t, err)
	return ev
}

func TestWebhookToken(t *testing.T) {
	assert.True(t, glprovider.ValidToken(secret, string(secret)))
	assert.False(t, glprovider.ValidToken(secret, "s3cret-hook-tokeN"))
	assert.False(t, glprovider.ValidToken(secret, ""))
	assert.False(t, glprovider.ValidToken(nil, ""), "an empty secret validates nothing")

	body := payload(t, "push", nil)
	for name, token := range map[string]string{"missing": "", "wrong": "guess", "longer": string(secret) + "x"} {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", strings.NewReader(string(body)))
			r.Header.Set(glprovider.HeaderEvent, glprovider.EventPush)
			if token != "" {
				r.Header.Set(glprovider.HeaderToken, token)
			}
			_, _, err := glprovider.ReadVerified(r, provider.WebhookSecrets{Default: secret}, 1<<20)
			assert.ErrorIs(t, err, glprovider.ErrBadToken)
		})
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(string(body)))
	r.Header.Set(glprovider.HeaderToken, string(secret))
	_, _, err := glprovider.ReadVerified(r, provider.WebhookSecrets{Default: secret}, 100)
	assert.ErrorContains(t, err, "over 100 bytes")

	_, err = glprovider.ParseWebhook("Wiki Page Hook", []byte(`{}`))
	assert.ErrorIs(t, err, glprovider.ErrUnknownEvent)
}

// One test per merge request action, each from GitLab's example payload.
func TestMergeRequestHook(t *testing.T) {
	const head = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7"
	for _, tc := range []struct {
		name       string
		edit       func(map[string]any)
		action     string
		state      string
		merged     bool
		newCommits bool
		sha        string
	}{
		{name: "open", action: "open", state: "open", sha: head},
		{name: "update without new commits", action: "update", state: "open", sha: head, edit: func(p map[string]any) {
			attrs(p)["action"] = "update"
			attrs(p)["title"] = "MS-Viewport, renamed"
		}},
		{name: "update with new commits", action: "update", state: "open", newCommits: true, sha: "b0b0b0", edit: func(p map[string]any) {
			attrs(p)["action"] = "update"
			attrs(p)["oldrev"] = head
			attrs(p)["last_commit"].(map[string]any)["id"] = "b0b0b0"
		}},
		{name: "close", action: "close", state: "closed", sha: head, edit: func(p map[string]any) {
			attrs(p)["action"], attrs(p)["state"] = "close", "closed"
		}},
		{name: "reopen", action: "reopen", state: "open", sha: head, edit: func(p map[string]any) {
			attrs(p)["action"] = "reopen"
		}},
		{name: "merge", action: "merge", state: "closed", merged: true, sha: head, edit: func(p map[string]any) {
			attrs(p)["action"], attrs(p)["state"] = "merge", "merged"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := deliver(t, glprovider.EventMergeRequest, payload(t, "merge_request", tc.edit))
			assert.Equal(t, glprovider.EventMergeRequest, ev.Kind)
			assert.Equal(t, tc.action, ev.Action)
			assert.Equal(t, "gitlabhq/gitlab-test", ev.Repository)
			assert.Equal(t, "user1", ev.Sender)
			assert.Equal(t, tc.newCommits, ev.NewCommits)
			pr := ev.PullRequest
			require.NotNil(t, pr)
			assert.Equal(t, 1, pr.Number)
			assert.Equal(t, tc.state, pr.State)
			assert.Equal(t, tc.merged, pr.Merged)
			assert.Equal(t, "ms-viewport", pr.HeadBranch)
			assert.Equal(t, tc.sha, pr.HeadSHA)
			assert.Equal(t, "master", pr.BaseBranch)
			assert.Equal(t, []string{"API"}, pr.Labels)
			assert.False(t, pr.Draft)
			assert.Equal(t, "", pr.Author, "the sender (id 1) is not the author (id 51)")
			assert.Equal(t, time.Date(2013, 12, 3, 17, 23, 34, 0, time.UTC), pr.UpdatedAt)
		})
	}
	t.Run("draft opened by its author", func(t *testing.T) {
		ev := deliver(t, glprovider.EventMergeRequest, payload(t, "merge_request", func(p map[string]any) {
			attrs(p)["draft"] = true
			attrs(p)["author_id"] = 1
		}))
		assert.True(t, ev.PullRequest.Draft)
		assert.Equal(t, "user1", ev.PullRequest.Author)
	})
	t.Run("from a fork", func(t *testing.T) {
		ev := deliver(t, glprovider.EventMergeRequest, payload(t, "merge_request", nil))
		assert.False(t, ev.PullRequest.Fork, "source and target are project 14")
		ev = deliver(t, glprovider.EventMergeRequest, payload(t, "merge_request", func(p map[string]any) {
			attrs(p)["source_project_id"] = 99
		}))
		assert.True(t, ev.PullRequest.Fork)
	})
	// A group hook sends the same kind; GitLab's example of one lacks the
	// iid and state (its keys end in spaces): the number is read from the
	// URL and the state from the action.
	t.Run("merge from a group hook", func(t *testing.T) {
		ev := deliver(t, glprovider.EventMergeRequest, payload(t, "group_merge_request", nil))
		assert.Equal(t, "merge", ev.Action)
		assert.Equal(t, "exm-namespace/example-project", ev.Repository)
		assert.Equal(t, 1402, ev.PullRequest.Number)
		assert.True(t, ev.PullRequest.Merged)
		assert.False(t, ev.PullRequest.Open())
		assert.Equal(t, "61b6a0d35dbaf915760233b637622e383d3cc9ec", ev.PullRequest.HeadSHA)
	})
}

func TestNoteHook(t *testing.T) {
	ev := deliver(t, glprovider.EventNote, payload(t, "note_merge_request", func(p map[string]any) {
		attrs(p)["note"] = "/petri redeploy"
	}))
	assert.Equal(t, glprovider.EventNote, ev.Kind)
	assert.Equal(t, "create", ev.Action)
	assert.Equal(t, "gitlab-org/gitlab-test", ev.Repository)
	assert.True(t, ev.IsPull)
	require.NotNil(t, ev.Comment)
	assert.Equal(t, provider.Comment{ID: 1244, Number: 1, Author: "root", Body: "/petri redeploy",
		CreatedAt: time.Date(2015, 5, 17, 18, 21, 36, 0, time.UTC), UpdatedAt: time.Date(2015, 5, 17, 18, 21, 36, 0, time.UTC)}, *ev.Comment)
	require.NotNil(t, ev.PullRequest)
	assert.Equal(t, []string{"Afterpod", "Element"}, ev.PullRequest.Labels)
	assert.Equal(t, "562e173be03b8ff2efb05345d12df18815438a4b", ev.PullRequest.HeadSHA)
	assert.True(t, ev.PullRequest.Open())

	// An internal note arrives under another kind, read as a note.
	internal := deliver(t, "Confidential Note Hook", payload(t, "note_merge_request", nil))
	assert.Equal(t, glprovider.EventNote, internal.Kind)
	assert.Equal(t, "This MR needs work.", internal.Comment.Body)
}

func TestPipelineHook(t *testing.T) {
	const sha = "bcbb5ec396a2c0f828686f14fac9b80b780504f2"
	job := provider.Gate{CheckRun: "test-build"}
	named := provider.Gate{StatusContext: "Preview"}

	ok := deliver(t, glprovider.EventPipeline, payload(t, "pipeline", nil))
	assert.Equal(t, glprovider.EventPipeline, ok.Kind)
	assert.Equal(t, "success", ok.Action)
	assert.Equal(t, "gitlab-org/gitlab-test", ok.Repository)
	assert.Equal(t, sha, ok.SHA)
	assert.Equal(t, "master", ok.Ref)
	require.NotNil(t, ok.Pipeline)
	assert.Equal(t, glprovider.Pipeline{ID: 31, Status: "success", Source: "merge_request_event", Jobs: ok.Pipeline.Jobs}, *ok.Pipeline)
	assert.Len(t, ok.Pipeline.Jobs, 5)
	require.NotNil(t, ok.PullRequest)
	assert.Equal(t, 1, ok.PullRequest.Number)
	st, known := ok.GateState(job)
	assert.True(t, known)
	assert.Equal(t, provider.GatePassed, st)
	_, known = ok.GateState(named)
	assert.False(t, known, "a pipeline without that name says nothing of the gate")
	_, known = ok.GateState(provider.Gate{CheckRun: "no-such-job"})
	assert.False(t, known)

	failed := deliver(t, glprovider.EventPipeline, payload(t, "pipeline", func(p map[string]any) {
		attrs(p)["status"] = "failed"
		attrs(p)["name"] = "Preview"
		for _, b := range p["builds"].([]any) {
			if b.(map[string]any)["name"] == "test-build" {
				b.(map[string]any)["status"] = "failed"
			}
		}
	}))
	assert.Equal(t, "failed", failed.Action)
	st, known = failed.GateState(job)
	assert.True(t, known)
	assert.Equal(t, provider.GateFailed, st)
	st, known = failed.GateState(named)
	assert.True(t, known)
	assert.Equal(t, provider.GateFailed, st)
	st, _ = failed.GateState(provider.Gate{CheckRun: "staging"})
	assert.Equal(t, provider.GatePending, st, "a job only created waits")
}

func TestPushHook(t *testing.T) {
	ev := deliver(t, glprovider.EventPush, payload(t, "push", nil))
	assert.Equal(t, glprovider.Event{Delivery: provider.Delivery{Kind: glprovider.EventPush, Action: "push", Repository: "mike/diaspora", Sender: "jsmith"},
		SHA: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", Ref: "refs/heads/master"}, ev)
}
