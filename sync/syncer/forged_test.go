package syncer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
)

// syncLogin is the login the GitHub stand-in's token acts as: the author of
// sync's comment.
const syncLogin = "petri[bot]"

// TestForgedStateSteersNothing: an author who posts sync's marker with a
// state of their choosing, before sync comments and after, changes nothing
// sync does. The forged state would mark every command handled (so a
// maintainer's /petri is ignored), keep the environment forever, expire the
// head commit at once, and name another deployment for sync to retire. sync
// reads its state from the cluster, where only it writes, and edits only its
// own comment; across a restart too.
func TestForgedStateSteersNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetPermission(ghRepo, "alice", "write")
	h.gh.SetPermission(ghRepo, "mallory", "read")
	pr := h.open(githubapi.PullRequest{Author: "mallory"})
	var forged render.State
	forged.LastCommand, forged.Kept = 1<<40, true
	shop := forged.App("shop")
	shop.ExpiredSHA, shop.Deployment, shop.DeploymentSHA, shop.DeploymentState = pr.HeadSHA, 4242, pr.HeadSHA, "success"
	forgedBody := render.CommentMarker + "\nforged\n" + forged.Marker() + "\n"
	before := h.gh.AddComment(ghRepo, pr.Number, "mallory", forgedBody)

	// The trigger label comes later: sync comments for the first time.
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.Labels = []string{"preview"} })
	h.prEvent(pr.Number, "labeled")
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	readyNow(t, h, name)
	h.waitComment(pr.Number, "- Expires: ")
	after := h.gh.AddComment(ghRepo, pr.Number, "mallory", forgedBody)

	sleep := h.command(pr.Number, "alice", "/petri sleep")
	h.waitReaction(sleep, "+1")
	h.waitComment(pr.Number, "`/petri sleep` from @alice: shop goes to sleep")

	h.restart()
	h.resync()
	wake := h.command(pr.Number, "alice", "/petri wake")
	h.waitReaction(wake, "+1")
	body := h.waitComment(pr.Number, "`/petri wake` from @alice: shop wakes up")
	assert.NotContains(t, body, "suspended by `/petri keep`", "never kept by a forged state")
	_, err := h.get(name)
	require.NoError(t, err, "the environment of a head commit a forged state marked expired stays")

	for _, c := range h.gh.Comments(ghRepo, pr.Number) {
		if c.ID == before.ID || c.ID == after.ID {
			assert.Equal(t, forgedBody, c.Body, "sync never edits an author's comment")
			assert.Zero(t, c.Edits)
		}
	}
	var st petriv1.PullRequestState
	require.NoError(t, h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: prstate.Name(prstate.Key{Repository: ghRepo, Number: pr.Number})}, &st))
	assert.Equal(t, wake.ID, st.Spec.LastCommand, "the last command handled is the maintainer's")
	assert.False(t, st.Spec.Kept)
	for _, a := range st.Spec.Applications {
		assert.Empty(t, a.ExpiredSHA, a.Name)
		assert.NotEqual(t, int64(4242), a.Deployment, a.Name)
	}
}
