package gitlab_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

// TestHostileAuthorOnGitLab is the short version of the hostile author
// (chaos scenario 8) on GitLab: notes carrying sync's marker and a forged
// state before and after sync's own, /petri commands from a Guest
// (posted, edited into a note, posted and deleted), a Developer's command
// delivered and replayed three times with the same UUID, and a title,
// branch and labels of template syntax, YAML, shell metacharacters, bytes
// that are not UTF-8 and 64 KiB of text. Sync takes no forged note for its
// own, no command of the Guest takes effect, the replayed command takes
// effect once, and the environment's source holds what the author wrote.
func TestHostileAuthorOnGitLab(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	g := st.GitLab
	srv := g.Server
	const forged = "<!-- petri-sync -->\nforged\n<!-- petri:state {\"lastCommand\":999999999,\"keep\":true} -->"
	title := "{{ .Secrets }} ${HOME} $(id) `id`; key: value\n- &a *a \xff\xfe " + strings.Repeat("x", 64<<10)
	branch := "feature/{{.X}}-$(id)-`id`;&|"
	labels := []string{stack.DemoLabel, "{{ printf \"%s\" }}", "a: b", "\xffbad"}
	iid := srv.OpenMergeRequest(stack.GitLabProject, gitlabapi.MergeRequest{Title: "Hostile", SourceBranch: branch,
		SHA: strings.Repeat("ab", 20), Draft: true, Author: g.Guest})
	before := srv.AddNote(stack.GitLabProject, iid, g.Guest, forged)
	srv.UpdateMergeRequest(stack.GitLabProject, iid, func(mr *gitlabapi.MergeRequest) {
		mr.Draft, mr.Title, mr.Labels = false, title, labels
	})
	name := render.EnvironmentName("hello", "gitlab:"+stack.GitLabProject, iid)
	env := func() *petriv1.EphemeralEnvironment {
		var e petriv1.EphemeralEnvironment
		if err := st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, &e); err != nil {
			return nil
		}
		return &e
	}
	require.Eventually(t, func() bool { return env() != nil && len(g.SyncNotes(iid)) == 1 }, 2*time.Minute, 20*time.Millisecond)
	e := env()
	assert.Equal(t, branch, e.Spec.Source.Branch, "the branch is held literally")
	after := srv.AddNote(stack.GitLabProject, iid, g.Guest, forged)

	// The Guest's commands: posted, edited into a note, posted and deleted.
	refused := srv.AddNote(stack.GitLabProject, iid, g.Guest, "/petri redeploy")
	edited := srv.AddNote(stack.GitLabProject, iid, g.Guest, "looks good")
	srv.EditNote(stack.GitLabProject, edited, "/petri redeploy")
	deleted := srv.AddNote(stack.GitLabProject, iid, g.Guest, "/petri redeploy")
	srv.DeleteNote(stack.GitLabProject, deleted)
	require.Eventually(t, func() bool { return g.Award(refused) == "thumbsdown" }, time.Minute, 20*time.Millisecond)
	assert.Empty(t, env().Annotations["petri.dev/redeploy"], "no command of a Guest took effect")

	// A Developer's command, delivered and replayed.
	cmd := srv.AddNote(stack.GitLabProject, iid, g.Developer, "/petri redeploy")
	require.Eventually(t, func() bool { return g.Award(cmd) == "thumbsup" }, time.Minute, 20*time.Millisecond)
	want := fmt.Sprintf("comment-%d", cmd)
	require.Eventually(t, func() bool { return env().Annotations["petri.dev/redeploy"] == want }, time.Minute, 20*time.Millisecond)
	var uuid string
	for _, d := range srv.Deliveries() {
		if d.Event == "Note Hook" && d.Action == "create" {
			uuid = d.UUID
		}
	}
	gen := env().Generation
	for range 3 {
		require.NoError(t, srv.Redeliver(uuid))
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, d := range srv.Deliveries() {
			if d.UUID == uuid && d.Status != 0 {
				n++
			}
		}
		return n == 4
	}, 30*time.Second, 20*time.Millisecond, "the replays were delivered")

	// Sync's one note is its own; the forged ones are untouched; the
	// Guest's commands are answered with thumbsdown or nothing.
	require.Eventually(t, func() bool {
		mine := g.SyncNotes(iid)
		return len(mine) == 1 && strings.Contains(mine[0].Body, "@"+g.Developer)
	}, time.Minute, 20*time.Millisecond)
	for _, n := range srv.Notes(stack.GitLabProject, iid) {
		if n.ID == before || n.ID == after {
			assert.Equal(t, forged, n.Body, "a forged note is left as it is")
		}
	}
	assert.NotEqual(t, "thumbsup", g.Award(edited))
	e = env()
	assert.Equal(t, want, e.Annotations["petri.dev/redeploy"], "the replayed command took effect once")
	assert.Equal(t, gen, e.Generation, "the replays changed nothing")
	assert.True(t, strings.HasPrefix(e.Spec.Source.Branch, "feature/{{.X}}"))

	srv.UpdateMergeRequest(stack.GitLabProject, iid, func(mr *gitlabapi.MergeRequest) { mr.State = "closed" })
	require.Eventually(t, func() bool { return env() == nil }, 3*time.Minute, 50*time.Millisecond)
}
