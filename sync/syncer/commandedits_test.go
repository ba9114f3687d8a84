package syncer_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/render"
)

// A comment is read as it stands when sync lists it: a command edited into
// a comment newer than the last one handled is acted on (in its author's
// name, with the author's permission), found by the resync since the
// delivery of an edit wakes nothing; a handled command edited into another
// is never acted on again.
func TestCommandEditedIntoACommentIsActedOnOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetPermission(ghRepo, "alice", "write")
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	readyNow(t, h, name)
	h.waitComment(pr.Number, "- Expires: ")
	annotations := func() map[string]string {
		e, err := h.get(name)
		require.NoError(t, err)
		return e.Annotations
	}

	c := h.gh.AddComment(ghRepo, pr.Number, "alice", "Looks good to me")
	d, err := h.gh.CommentEditedEvent(ghRepo, c.ID, "/petri sleep")
	require.NoError(t, err)
	assert.Less(t, h.send(d), 300, "an edit's delivery is taken, not refused")
	h.resync()
	h.waitReaction(c, "+1")
	h.waitComment(pr.Number, "`/petri sleep` from @alice: shop goes to sleep")
	assert.Contains(t, annotations(), render.AnnotationSleepRequested)

	d, err = h.gh.CommentEditedEvent(ghRepo, c.ID, "/petri redeploy")
	require.NoError(t, err)
	assert.Less(t, h.send(d), 300, "an edit's delivery is taken, not refused")
	h.resync()
	h.resync()
	assert.NotContains(t, annotations(), render.AnnotationRedeploy, "a handled command edited into another is not acted on")
	assert.Equal(t, 1, requests(h.gh, http.MethodPost, fmt.Sprintf("/issues/comments/%d/reactions", c.ID)), "the comment is answered once")
	assert.NotContains(t, h.comment(pr.Number), "`/petri redeploy` from @alice")
}
