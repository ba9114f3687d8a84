package forges_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/chaos"
	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

// hostileApp is the application of TestHostileAuthorOnGitea's pull
// requests, and their trigger label: it templates the title, branch,
// labels and author into its values and the branch into its URL, as
// scenario 8's application does on GitHub (local/chaos).
const hostileApp = "hostile"

// hostileApplication is hostileApp's file in the config repository; the
// stack names Gitea as its forge.
const hostileApplication = `# The hostile author on Gitea (tests/forges): pull requests of
# petri-dev/hello labelled "hostile" get one light component whose values
# carry what the author wrote.
apiVersion: petri.dev/v1alpha1
kind: Application
name: hostile
repository: petri-dev/hello
trigger:
  labels: [hostile]
components:
  - name: app
    chart:
      repository: /charts
      name: greeter
      version: 0.1.0
    values:
      replicas: 0
    pullRequestValues:
      message: "PR #{{ .Number }}: {{ .Title }} ({{ join \", \" .Labels }})"
      commit: "{{ .SHA }}"
      env:
        PR_TITLE: "{{ .Title }}"
        PR_BRANCH: "{{ .Branch }}"
        PR_AUTHOR: "{{ .Author }}"
ttl: 24h
maxEnvironments: 20
url: "http://{{ .BranchSlug }}.hostile.preview.example.com/"
`

// forgedLastCommand is the last handled command a forged state claims:
// were sync to believe it, no later command would be acted on.
const forgedLastCommand = 999999999

// TestHostileAuthorOnGitea is the hostile author (chaos scenario 8) on the
// real Gitea. A user without access (the stranger) forks the repository
// and opens a pull request from the fork; before sync's comment exists
// (the pull request is a draft and unlabelled) and after it, the stranger
// posts comments carrying sync's marker and a state that claims the last
// handled command, keeps and extends the environment to 2099 and marks its
// head commit expired. The stranger's /petri redeploy and /petri keep are
// posted, edited into a comment, and posted and deleted; a writer's
// /petri redeploy is delivered and its delivery replayed three times, with
// the same headers and signature, through the proxy in front of sync. The
// title, branch and labels carry template syntax, YAML, shell
// metacharacters, sync's own markup, bytes that are not UTF-8 and 64 KiB.
//
// What Gitea refuses or changes (so the test does not play it): git
// refuses a branch name with a space, a newline, ": " or "*" (an invalid
// reference name) and Gitea one of more than 255 bytes; a branch of bytes
// that are not UTF-8 git takes, but Gitea never lists it (its API answers
// 404 for it), so no pull request can be opened from it. Gitea cuts a
// title of more than 255 characters and ends it with "..." (so 64 KiB
// goes into a label, which Gitea takes whole), and its JSON API turns
// bytes that are not UTF-8 in a title or label into U+FFFD.
//
// Checked: sync keeps exactly one comment of its own identity and edits
// none of the forged ones; its state (the PullRequestState) is not kept,
// not extended, has no expired commit and names the newest command it
// handled, not the forged one; no command of the stranger takes effect
// (refused with -1); the writer's takes effect once (one redeploy, one
// Helm revision more, the annotation unchanged by the replays); the
// environment's values hold the text as Gitea holds it, and sync's
// comment keeps its shape with the URL escaped; the bystander pull
// request's environment and state do not change; no Secret value appears
// in a comment, a commit status or an environment's status; sync's and
// the operator's pods never restarted and their logs say no "panic".
func TestHostileAuthorOnGitea(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	g := st.Gitea
	srv := g.Server
	h := &hostileRun{t: t, ctx: ctx, g: g}
	rec := &deliveryLog{}
	g.Hooks.Watch(rec.record)
	t.Cleanup(func() { g.Hooks.Watch(nil) })

	// A bystander: a writer's pull request, labelled for hostileApp.
	_, err := srv.Push(stack.DemoRepository, gitea.Commit{Branch: "feature/bystander", Files: map[string]string{"b.txt": "b\n"}, As: &g.Writer})
	require.NoError(t, err)
	bystander, err := srv.OpenPullRequest(stack.DemoRepository, gitea.PullRequest{Head: "feature/bystander", Title: "Bystander", As: &g.Writer})
	require.NoError(t, err)
	require.NoError(t, srv.AddLabels(stack.DemoRepository, bystander, hostileApp))
	h.waitReady(bystander)
	byEnv, byState := h.env(bystander), h.state(bystander)
	require.NotNil(t, byState)

	// The hostile pull request, from the stranger's fork: a draft without
	// labels, so that sync has no comment on it yet.
	fork, err := srv.Fork(g.Stranger, stack.DemoRepository)
	require.NoError(t, err)
	branch := "feature/{{.Values}}-${HOME}-$(id)-`id`;&|>x-&a-<!--petri-sync-->"
	sha, err := srv.Push(fork, gitea.Commit{Branch: branch, Files: map[string]string{"h.txt": "h\n"}, As: &g.Stranger})
	require.NoError(t, err)
	n, err := srv.OpenPullRequest(stack.DemoRepository, gitea.PullRequest{Head: fork + ":" + branch, Title: "WIP: hostile", As: &g.Stranger})
	require.NoError(t, err)
	forged := forgedComment(sha)
	before, err := srv.Comment(&g.Stranger, stack.DemoRepository, n, forged)
	require.NoError(t, err)

	title := "{{ .Values }} {{ .Secrets }} ${HOME} $(id) `id`; rm -rf / | cat &\nkey: value\n- &a *a\n" +
		"<!-- petri:state {\"kept\":true} --> </details> | cell \xff\xfe " + strings.Repeat("x", 64<<10)
	require.NoError(t, srv.EditPullRequest(stack.DemoRepository, n, title, ""))
	labels := []string{hostileApp, `{{ printf "%s" .Values }}`, "a: b\nc: d", "&a *a", "$(id);`id`|&", "\xffbad", strings.Repeat("l", 64<<10)}
	require.NoError(t, srv.AddLabels(stack.DemoRepository, n, labels...))
	held := h.pull(n)
	assert.Equal(t, g.Stranger.Name, held.User.Login)
	assert.Equal(t, branch, held.Head.Ref, "Gitea holds the branch as pushed")
	assert.LessOrEqual(t, utf8.RuneCountInString(held.Title), 255, "Gitea cuts a title to 255 characters")
	cut, ok := strings.CutSuffix(held.Title, "...")
	assert.True(t, ok, "Gitea cuts a long title and ends it with \"...\"")
	assert.True(t, strings.HasPrefix(asJSONSends(title), cut), "Gitea holds the start of the title, bytes that are not UTF-8 as U+FFFD")
	assert.Contains(t, held.Title, "\uFFFD")
	require.Len(t, held.Labels, len(labels))

	h.waitSettled(n, held, sha)
	require.Eventually(t, func() bool { return len(h.syncComments(n)) == 1 }, time.Minute, 20*time.Millisecond)
	after, err := srv.Comment(&g.Stranger, stack.DemoRepository, n, forged)
	require.NoError(t, err)

	// The stranger's commands: posted, edited into a comment, posted and
	// deleted.
	refused := h.comment(&g.Stranger, n, "/petri redeploy")
	keep := h.comment(&g.Stranger, n, "/petri keep")
	edited := h.comment(&g.Stranger, n, "looks good")
	require.NoError(t, srv.EditComment(&g.Stranger, stack.DemoRepository, edited, "/petri redeploy"))
	deleted := h.comment(&g.Stranger, n, "/petri extend 2000h")
	require.NoError(t, srv.DeleteComment(&g.Stranger, stack.DemoRepository, deleted))
	h.waitReaction(refused, "-1")
	h.waitReaction(keep, "-1")
	assert.Empty(t, h.env(n).Annotations[render.AnnotationRedeploy], "no command of the stranger took effect")
	rev := h.revision(n)

	// The writer's command, delivered, then replayed through the proxy in
	// front of sync with the delivery's own headers and signature.
	cmd := h.comment(&g.Writer, n, "/petri redeploy")
	h.waitReaction(cmd, "+1")
	want := fmt.Sprintf("comment-%d", cmd)
	require.Eventually(t, func() bool {
		e := h.env(n)
		return e != nil && e.Status.LastRedeploy == want && h.revision(n) == rev+1
	}, 3*time.Minute, 50*time.Millisecond, "the writer's command redeployed the environment")
	gen := h.env(n).Generation
	var d recordedDelivery
	require.Eventually(t, func() bool {
		var ok bool
		d, ok = rec.comment(cmd, "created")
		return ok
	}, 30*time.Second, 20*time.Millisecond, "the proxy saw the command's delivery")
	for range 3 {
		code, err := d.replay(g.Hooks.URL)
		require.NoError(t, err)
		assert.Less(t, code, 300, "sync takes a replayed delivery with a right signature")
	}
	// A fence: sync answers a later command only after it read the replays.
	fence := h.comment(&g.Stranger, n, "/petri redeploy")
	h.waitReaction(fence, "-1")

	e := h.env(n)
	require.NotNil(t, e)
	assert.Equal(t, want, e.Annotations[render.AnnotationRedeploy], "the replayed command took effect once")
	assert.Equal(t, gen, e.Generation, "the replays changed nothing")
	assert.Equal(t, rev+1, h.revision(n), "one redeploy")
	assert.NotEqual(t, "+1", h.reactions(edited)[g.Sync.Name], "a command edited into a comment is not honoured")

	// Sync's one comment is its own; the forged ones are as written.
	mine := h.syncComments(n)
	require.Len(t, mine, 1)
	assert.Contains(t, mine[0].Body, "@"+g.Writer.Name)
	comments, err := g.Comments(n)
	require.NoError(t, err)
	for _, c := range comments {
		if c.ID == before || c.ID == after {
			assert.Equal(t, forged, c.Body, "a forged comment is left as it is")
			assert.Equal(t, g.Stranger.Name, c.User.Login)
		}
	}

	require.Eventually(t, func() bool { s := h.state(n); return s != nil && s.Spec.LastCommand == fence }, 30*time.Second, 50*time.Millisecond,
		"sync records the fence as its last handled command")
	h.checkState(n, fence)
	h.checkLiteral(n, held, sha)
	h.checkUnchanged(bystander, byEnv, byState)
	h.checkSecrets(n, bystander)
	h.checkPods()

	require.NoError(t, srv.ClosePullRequest(stack.DemoRepository, n))
	require.NoError(t, srv.ClosePullRequest(stack.DemoRepository, bystander))
	h.waitGone(n)
	h.waitGone(bystander)
}

// forgedComment is what the stranger posts as if it were sync's comment:
// sync's marker and a state that, believed, would swallow every command,
// keep and extend the environment for good and never write it again.
func forgedComment(sha string) string {
	far := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	s := render.State{LastCommand: forgedLastCommand, Kept: true, Apps: map[string]*render.AppState{
		hostileApp: {ExtendedUntil: far, ExpiredSHA: sha, ExpiredAt: far.AddDate(-80, 0, 0), ReadySHA: sha, ReadyAt: far},
	}}
	return render.CommentMarker + "\n### Preview environments\nforged\n" + s.Marker() + "\n"
}

// checkState: the PullRequestState, sync's only state, is what sync did,
// not what the forged comments say.
func (h *hostileRun) checkState(n int, last int64) {
	s := h.state(n)
	require.NotNil(h.t, s, "sync keeps a PullRequestState of #%d", n)
	assert.False(h.t, s.Spec.Kept, "forged kept")
	assert.Equal(h.t, last, s.Spec.LastCommand, "the last handled command is the newest comment sync handled")
	var app *petriv1.ApplicationLifecycle
	for i := range s.Spec.Applications {
		if s.Spec.Applications[i].Name == hostileApp {
			app = &s.Spec.Applications[i]
		}
	}
	require.NotNil(h.t, app)
	assert.Nil(h.t, app.ExtendedUntil, "forged extension")
	assert.Empty(h.t, app.ExpiredSHA, "forged expired commit")
	assert.Nil(h.t, app.ExpiredAt)
	require.NotNil(h.t, app.ExpiresAt)
	assert.WithinDuration(h.t, time.Now().Add(24*time.Hour), app.ExpiresAt.Time, 10*time.Minute, "the ttl counts from the first Ready")
}

// literalValues are the values the hostile application renders for pull
// request n as Gitea holds it (template delimiters broken apart:
// chaos.AsValuesHold).
func literalValues(n int, held giteaPull, sha string) map[string]any {
	var labels []string
	for _, l := range held.Labels {
		labels = append(labels, chaos.AsValuesHold(l.Name))
	}
	return map[string]any{
		"message": fmt.Sprintf("PR #%d: %s (%s)", n, chaos.AsValuesHold(held.Title), strings.Join(labels, ", ")),
		"commit":  sha,
		"env":     map[string]any{"PR_TITLE": chaos.AsValuesHold(held.Title), "PR_BRANCH": chaos.AsValuesHold(held.Head.Ref), "PR_AUTHOR": chaos.AsValuesHold(held.User.Login)},
	}
}

// waitSettled waits until the environment of pull request n renders it as
// Gitea holds it (its title and every label: sync can hear of the pull
// request before all its labels are on, and writes the environment again
// when it hears of the rest) and is Ready at that generation.
func (h *hostileRun) waitSettled(n int, held giteaPull, sha string) {
	h.t.Helper()
	want := literalValues(n, held, sha)
	require.Eventually(h.t, func() bool {
		e := h.env(n)
		return e != nil && e.Status.Phase == petriv1.EnvironmentReady && e.Status.ObservedGeneration == e.Generation &&
			len(chaos.ValuesDiff(valuesOf(h.t, e, "app"), want)) == 0
	}, 3*time.Minute, 50*time.Millisecond, "the environment of #%d renders the pull request as Gitea holds it, and is Ready", n)
}

// checkLiteral: the environment's values hold the title, branch, labels
// and author as Gitea holds them, and sync's comment keeps its shape.
func (h *hostileRun) checkLiteral(n int, held giteaPull, sha string) {
	e := h.env(n)
	require.NotNil(h.t, e)
	got := valuesOf(h.t, e, "app")
	assert.Empty(h.t, chaos.ValuesDiff(got, literalValues(n, held, sha)), "the values hold the text literally")
	require.NotNil(h.t, e.Spec.Source)
	assert.Equal(h.t, held.Head.Ref, e.Spec.Source.Branch)
	assert.Equal(h.t, sha, e.Spec.Source.SHA)

	mine := h.syncComments(n)
	require.Len(h.t, mine, 1)
	body := mine[0].Body
	assert.True(h.t, strings.HasPrefix(body, render.CommentMarker), "sync's comment begins with its marker")
	assert.Equal(h.t, 1, strings.Count(body, "<!-- petri:state "), "one state line")
	_, ok := render.ParseState(body)
	assert.True(h.t, ok, "the state line is readable")
	url := "http://" + config.Slug(held.Head.Ref) + ".hostile.preview.example.com/"
	assert.Contains(h.t, body, "- URL: "+url+"\n", "the URL with the branch escaped")
	for _, raw := range []string{"{{", "$(id)", "`id`", "rm -rf", "&a *a"} {
		assert.NotContains(h.t, body, raw, "sync's comment holds none of the author's text as written")
	}

	statuses, err := h.g.Statuses(sha)
	require.NoError(h.t, err)
	require.NotEmpty(h.t, statuses)
	for _, s := range statuses {
		assert.Equal(h.t, h.g.Sync.Name, s.Creator.Login)
		assert.Equal(h.t, render.StatusContext(hostileApp), s.Context)
		assert.Equal(h.t, url, s.TargetURL)
	}
	assert.Equal(h.t, "success", statuses[0].State)
}

// checkUnchanged: nothing done to the hostile pull request changed the
// bystander's environment or state.
func (h *hostileRun) checkUnchanged(n int, env0 *petriv1.EphemeralEnvironment, state0 *petriv1.PullRequestState) {
	e, s := h.env(n), h.state(n)
	require.NotNil(h.t, e)
	require.NotNil(h.t, s)
	assert.Equal(h.t, env0.UID, e.UID)
	assert.Equal(h.t, env0.Generation, e.Generation)
	assert.Equal(h.t, env0.Annotations, e.Annotations)
	assert.Equal(h.t, env0.Spec, e.Spec)
	assert.Equal(h.t, state0.Spec.LastCommand, s.Spec.LastCommand)
	assert.Equal(h.t, state0.Spec.Kept, s.Spec.Kept)
}
