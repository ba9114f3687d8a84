package gitlabapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/sync/provider"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
)

// received is what a hook receiver got, in order.
type received struct {
	mu     sync.Mutex
	events []glprovider.Event
	uuids  []string
}

func (r *received) get() ([]glprovider.Event, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]glprovider.Event(nil), r.events...), append([]string(nil), r.uuids...)
}

// TestHooksReadBySync: the stand-in's deliveries carry the secret token
// and are read by sync's own reader into the events a real GitLab's
// would be: open, a push (update with oldrev), a label change (update
// without), notes created and edited, a pipeline, close, merge; a muted
// delivery is not sent and a redelivery carries the same UUID.
func TestHooksReadBySync(t *testing.T) {
	const secret = "hook-secret"
	got := &received{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, body, err := glprovider.ReadVerified(r, provider.WebhookSecrets{Default: []byte(secret)}, 1<<20)
		if !assert.NoError(t, err) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		ev, err := glprovider.ParseWebhook(kind, body)
		assert.NoError(t, err, "%s: %s", kind, body)
		got.mu.Lock()
		got.events = append(got.events, ev)
		got.uuids = append(got.uuids, r.Header.Get(glprovider.HeaderDelivery))
		got.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer recv.Close()
	srv := gitlabapi.New(gitlabapi.Options{Tokens: map[string]string{"t": "bot"}})
	defer srv.Close()
	const path = "group/sub/project"
	srv.AddProject(path)
	srv.AddHook(gitlabapi.Hook{URL: recv.URL, Token: secret, Under: "group"})
	srv.AddProject("elsewhere/other")
	srv.AddHook(gitlabapi.Hook{URL: recv.URL + "/never", Token: secret, Under: "elsewhere"})

	iid := srv.OpenMergeRequest(path, gitlabapi.MergeRequest{Title: "T", SHA: "a1", SourceBranch: "f", Labels: []string{"preview"}, Author: "alice"})
	srv.Push(path, "f", "b2", "alice")
	srv.UpdateMergeRequest(path, iid, func(mr *gitlabapi.MergeRequest) { mr.Labels = append(mr.Labels, "x") })
	note := srv.AddNote(path, iid, "alice", "/petri redeploy")
	srv.EditNote(path, note, "/petri sleep")
	srv.AddPipeline(path, gitlabapi.Pipeline{SHA: "b2", Ref: "f", Status: "success", Jobs: []gitlabapi.Job{{Name: "test", Status: "success"}}})
	srv.MuteHooks(true)
	srv.AddNote(path, iid, "alice", "lost")
	srv.MuteHooks(false)
	srv.UpdateMergeRequest(path, iid, func(mr *gitlabapi.MergeRequest) { mr.State = "closed" })
	srv.UpdateMergeRequest(path, iid, func(mr *gitlabapi.MergeRequest) { mr.State = "opened" })
	srv.UpdateMergeRequest(path, iid, func(mr *gitlabapi.MergeRequest) { mr.State = "merged" })

	const want = 10
	require.Eventually(t, func() bool { evs, _ := got.get(); return len(evs) == want }, 10*time.Second, 5*time.Millisecond)
	evs, uuids := got.get()
	kinds := []string{}
	for _, ev := range evs {
		assert.Equal(t, path, ev.Repository)
		kinds = append(kinds, ev.Kind+"/"+ev.Action)
	}
	assert.Equal(t, []string{"Merge Request Hook/open", "Push Hook/push", "Merge Request Hook/update", "Merge Request Hook/update",
		"Note Hook/create", "Note Hook/update", "Pipeline Hook/success", "Merge Request Hook/close", "Merge Request Hook/reopen",
		"Merge Request Hook/merge"}, kinds)
	open := evs[0].PullRequest
	assert.Equal(t, iid, open.Number)
	assert.Equal(t, "a1", open.HeadSHA)
	assert.Equal(t, "alice", open.Author)
	assert.Equal(t, []string{"preview"}, open.Labels)
	assert.True(t, evs[2].NewCommits, "the push's update names oldrev")
	assert.Equal(t, "b2", evs[2].PullRequest.HeadSHA)
	assert.False(t, evs[3].NewCommits, "a label change brings no commits")
	assert.Equal(t, "/petri redeploy", evs[4].Comment.Body)
	assert.Equal(t, "alice", evs[4].Comment.Author)
	assert.Equal(t, iid, evs[4].Comment.Number)
	assert.Equal(t, "b2", evs[6].SHA)
	assert.True(t, evs[9].PullRequest.Merged)

	lost := 0
	for _, d := range srv.Deliveries() {
		if d.Muted {
			lost++
		}
	}
	assert.Equal(t, 1, lost)
	require.NoError(t, srv.Redeliver(uuids[4]))
	require.Eventually(t, func() bool { evs, _ := got.get(); return len(evs) == want+1 }, 10*time.Second, 5*time.Millisecond)
	_, uuids = got.get()
	assert.Equal(t, uuids[4], uuids[want])
}
