package syncer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// command posts a comment as a person and delivers its issue_comment
// webhook.
func (h *harness) command(number int, author, body string) githubapi.Comment {
	h.t.Helper()
	c := h.gh.AddComment(ghRepo, number, author, body)
	d, err := h.gh.IssueCommentEvent(ghRepo, number, c.ID)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusAccepted, h.send(d))
	return c
}

func (h *harness) waitReaction(c githubapi.Comment, content string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		rs := h.gh.Reactions(ghRepo, c.ID)
		return len(rs) == 1 && rs[0].Content == content
	}, 15*time.Second, 10*time.Millisecond, "comment %d (%q) never got %s: %+v", c.ID, c.Body, content, h.gh.Reactions(ghRepo, c.ID))
}

// Commands from people with write access act (with a +1 and a reply);
// anyone else's are refused (-1, and why); each is acted on once, also by a
// new sync process; one whose webhook never arrived is found by the resync,
// and one written while sync was down by the next sync.
func TestPullRequestCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetPermission(ghRepo, "alice", "write")
	h.gh.SetPermission(ghRepo, "mia", "maintain")
	h.gh.SetPermission(ghRepo, "bob", "read")
	pr, name := h.deployed()
	readyNow(t, h, name)
	h.waitComment(pr.Number, "- Expires: ")
	annotations := func() map[string]string {
		e, err := h.get(name)
		require.NoError(t, err)
		return e.Annotations
	}

	refused := h.command(pr.Number, "bob", "/petri sleep")
	h.waitReaction(refused, "-1")
	h.waitComment(pr.Number, "`/petri sleep` from @bob: refused: @bob needs write access to acme/shop (has read)")
	assert.NotContains(t, annotations(), render.AnnotationSleepRequested)

	sleep := h.command(pr.Number, "alice", "/petri sleep")
	h.waitReaction(sleep, "+1")
	h.waitComment(pr.Number, "`/petri sleep` from @alice: shop goes to sleep")
	assert.Equal(t, sleep.CreatedAt.UTC().Format(time.RFC3339), annotations()[render.AnnotationSleepRequested])
	e, _ := h.get(name)
	assert.Contains(t, managers(e, render.AnnotationSleepRequested), "petri-sync-sleep-requested", "sync owns the annotation it set, under its own field manager")

	wake := h.command(pr.Number, "mia", "Waking it up:\n/petri wake")
	h.waitReaction(wake, "+1")
	h.waitComment(pr.Number, "`/petri wake` from @mia: shop wakes up")
	assert.Equal(t, wake.CreatedAt.UTC().Format(time.RFC3339), annotations()[render.AnnotationWakeRequested])

	redeploy := h.command(pr.Number, "alice", "/petri redeploy")
	h.waitReaction(redeploy, "+1")
	h.waitComment(pr.Number, "`/petri redeploy` from @alice: shop deploys every component again")
	assert.Equal(t, fmt.Sprintf("comment-%d", redeploy.ID), annotations()[render.AnnotationRedeploy], "a new value asks the operator for one redeploy")

	before := expiresAt(t, h.comment(pr.Number))
	extend := h.command(pr.Number, "alice", "/petri extend 2h")
	h.waitReaction(extend, "+1")
	body := h.waitComment(pr.Number, "`/petri extend 2h` from @alice: shop expires at")
	assert.Equal(t, before.Add(2*time.Hour), expiresAt(t, body))

	keep := h.command(pr.Number, "alice", "/petri keep")
	h.waitReaction(keep, "+1")
	h.waitComment(pr.Number, "- Expiry: suspended by `/petri keep`")

	bad := h.command(pr.Number, "alice", "/petri extend forever")
	h.waitReaction(bad, "-1")
	h.waitComment(pr.Number, `/petri extend forever`+"` from @alice: not understood: \"forever\" is not a duration")

	// Each is acted on once: not again by a resync, nor by a new sync
	// process that reads what was handled from the comment.
	acted := annotations()
	notes := h.comment(pr.Number)
	h.resync()
	h.restart()
	h.resync()
	for _, c := range []githubapi.Comment{refused, sleep, wake, redeploy, extend, keep, bad} {
		assert.Equal(t, 1, requests(h.gh, http.MethodPost, fmt.Sprintf("/issues/comments/%d/reactions", c.ID)), "comment %q handled twice", c.Body)
	}
	for _, k := range []string{render.AnnotationSleepRequested, render.AnnotationWakeRequested, render.AnnotationRedeploy} {
		assert.Equal(t, acted[k], annotations()[k], "%s set again", k)
	}
	assert.Equal(t, notes, h.comment(pr.Number), "nothing acted on twice")

	// A command whose webhook never arrived: the resync finds it.
	lost := h.gh.AddComment(ghRepo, pr.Number, "alice", "/petri sleep")
	h.resync()
	h.waitReaction(lost, "+1")
	require.Eventually(t, func() bool {
		return annotations()[render.AnnotationSleepRequested] == lost.CreatedAt.UTC().Format(time.RFC3339)
	}, 10*time.Second, 10*time.Millisecond)

	// One written while sync was down: the next sync finds it at start.
	h.stop()
	down := h.gh.AddComment(ghRepo, pr.Number, "alice", "/petri wake")
	h.start()
	h.waitReaction(down, "+1")
	h.waitComment(pr.Number, "`/petri wake` from @alice: shop wakes up")
	assert.Len(t, h.gh.Comments(ghRepo, pr.Number), 10, "sync's comment and nine commands, nothing more")

	// sync's own apply (a push) neither removes the annotations it set
	// under their own managers nor one a person set with kubectl.
	patch := []byte(`{"metadata":{"annotations":{"team":"checkout"}}}`)
	require.NoError(t, h.c.Patch(h.ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}},
		client.RawPatch(types.MergePatchType, patch), client.FieldOwner("kubectl-annotate")))
	second := githubapi.SHA("push after commands")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = second })
	h.prEvent(pr.Number, "synchronize")
	e = h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == second })
	assert.Equal(t, "checkout", e.Annotations["team"])
	assert.Equal(t, down.CreatedAt.UTC().Format(time.RFC3339), e.Annotations[render.AnnotationWakeRequested])
	assert.Equal(t, lost.CreatedAt.UTC().Format(time.RFC3339), e.Annotations[render.AnnotationSleepRequested])
	assert.Equal(t, fmt.Sprintf("comment-%d", redeploy.ID), e.Annotations[render.AnnotationRedeploy])
}

// managers lists the field managers that own an annotation.
func managers(e *petriv1.EphemeralEnvironment, key string) []string {
	var out []string
	for _, mf := range e.ManagedFields {
		if mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), `"f:`+key+`"`) {
			out = append(out, mf.Manager)
		}
	}
	return out
}

// expiresAt reads the expiry the comment shows.
func expiresAt(t *testing.T, body string) time.Time {
	t.Helper()
	_, rest, ok := strings.Cut(body, "- Expires: ")
	require.True(t, ok, body)
	ts, _, _ := strings.Cut(rest, " (")
	at, err := time.Parse("2006-01-02 15:04:05 UTC", ts)
	require.NoError(t, err, body)
	return at
}

// A command sent to a replica that does not lead is acted on by the
// leader, once.
func TestCommandToTheFollowerIsActedOnByTheLeader(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	a := rs.start("a")
	rs.waitLeader(a, 20*time.Second)
	b := rs.start("b")
	gh := rs.h.gh
	gh.SetPermission(ghRepo, "alice", "admin")
	pr := openPR(t, gh, a)
	name := envName(pr.Number)
	rs.h.waitEnv(name, nil)

	c := gh.AddComment(ghRepo, pr.Number, "alice", "/petri sleep")
	d, err := gh.IssueCommentEvent(ghRepo, pr.Number, c.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, b.send(t, d))
	require.Eventually(t, func() bool {
		e, err := rs.h.get(name)
		return err == nil && e.Annotations[render.AnnotationSleepRequested] != ""
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return len(gh.Reactions(ghRepo, c.ID)) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "+1", gh.Reactions(ghRepo, c.ID)[0].Content)
	b.recorded(t, "recorded", 1, "the follower recorded it for the leader")
}

// A delivery is a hint: the command, its author and its text are read from
// GitHub, so a delivery signed with the webhook secret but claiming another
// author, or a comment that does not exist, changes nothing.
func TestForgedCommandDeliveryIsNotActedOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetPermission(ghRepo, "alice", "admin")
	h.gh.SetPermission(ghRepo, "bob", "read")
	pr, name := h.deployed()

	send := func(d githubapi.Delivery, edit func(map[string]any)) {
		var p map[string]any
		require.NoError(t, json.Unmarshal(d.Body, &p))
		edit(p)
		body, err := json.Marshal(p)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, h.send(githubapi.Delivery{Event: d.Event, Body: body}))
	}
	bobs := h.gh.AddComment(ghRepo, pr.Number, "bob", "/petri sleep")
	d, err := h.gh.IssueCommentEvent(ghRepo, pr.Number, bobs.ID)
	require.NoError(t, err)
	send(d, func(p map[string]any) { p["comment"].(map[string]any)["user"].(map[string]any)["login"] = "alice" })
	send(d, func(p map[string]any) {
		c := p["comment"].(map[string]any)
		c["id"], c["body"] = 99999999, "/petri redeploy"
		c["user"].(map[string]any)["login"] = "alice"
	})
	h.waitReaction(bobs, "-1")
	h.waitComment(pr.Number, "`/petri sleep` from @bob: refused: @bob needs write access to acme/shop (has read)")
	h.resync()
	e, err := h.get(name)
	require.NoError(t, err)
	assert.NotContains(t, e.Annotations, render.AnnotationSleepRequested)
	assert.NotContains(t, e.Annotations, render.AnnotationRedeploy)
	assert.NotContains(t, h.comment(pr.Number), "@alice")
}

// permissionFaults stands in for a forge's command reader whose
// permission lookup fails for some authors.
type permissionFaults struct {
	provider.CommandReader
	fail map[string]error
}

func (p permissionFaults) Permission(ctx context.Context, repository, user string) (string, error) {
	if err := p.fail[user]; err != nil {
		return "", err
	}
	return p.CommandReader.Permission(ctx, repository, user)
}

func withPermissionFaults(fail map[string]error) func(provider.CommandReader) provider.CommandReader {
	return func(c provider.CommandReader) provider.CommandReader {
		return permissionFaults{CommandReader: c, fail: fail}
	}
}

// failedReconciles is how many of the harness's reconciles failed.
func (h *harness) failedReconciles() float64 {
	return testutil.ToFloat64(h.m.Reconciles.WithLabelValues("error"))
}

// A command whose author the forge does not know (an account deleted after
// it commented: Gitea shows its comments as Ghost's and answers 404 for
// Ghost's permission) is refused as a stranger's is; a maintainer's command
// after it is acted on, and the repository's passes do not fail for it.
func TestCommandOfAnUnknownAuthorIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles(""), commands: withPermissionFaults(map[string]error{
		"Ghost": fmt.Errorf("permission of Ghost on %s: %w", ghRepo, provider.ErrNotFound),
	})})
	h.gh.SetPermission(ghRepo, "mia", "maintain")
	pr, name := h.deployed()
	readyNow(t, h, name)
	h.waitComment(pr.Number, "- Expires: ")

	ghost := h.command(pr.Number, "Ghost", "/petri redeploy")
	keep := h.command(pr.Number, "mia", "/petri keep")
	h.waitReaction(ghost, "-1")
	h.waitReaction(keep, "+1")
	body := h.waitComment(pr.Number, "- Expiry: suspended by `/petri keep`")
	assert.Contains(t, body, "`/petri redeploy` from @Ghost: refused: @Ghost needs write access to acme/shop (has none)")
	e, err := h.get(name)
	require.NoError(t, err)
	assert.NotContains(t, e.Annotations, render.AnnotationRedeploy)
	assert.Zero(t, h.failedReconciles(), "no pass failed for the unknown author")
}

// A command that keeps failing (here its author's permission cannot be
// read) is tried again, and the commands after it wait, until it has
// failed five times over at least ten minutes; then it is given up,
// answered as refused with a line in the comment, and the commands after
// it are acted on.
func TestCommandThatKeepsFailingIsGivenUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles(""), commands: withPermissionFaults(map[string]error{
		"flaky": errors.New("permission of flaky: 502 Bad Gateway"),
	})})
	h.gh.SetPermission(ghRepo, "mia", "maintain")
	pr, name := h.deployed()
	readyNow(t, h, name)
	h.waitComment(pr.Number, "- Expires: ")

	flaky := h.command(pr.Number, "flaky", "/petri sleep")
	keep := h.command(pr.Number, "mia", "/petri keep")
	require.Eventually(t, func() bool { return h.failedReconciles() >= 6 }, 15*time.Second, 10*time.Millisecond, "the failing command is tried again")
	assert.Empty(t, h.gh.Reactions(ghRepo, flaky.ID), "tried again, not given up, within ten minutes")
	assert.Empty(t, h.gh.Reactions(ghRepo, keep.ID), "the command after it waits")

	h.clock.Step(10 * time.Minute)
	h.resync()
	h.waitReaction(flaky, "-1")
	h.waitReaction(keep, "+1")
	body := h.waitComment(pr.Number, "- Expiry: suspended by `/petri keep`")
	assert.Contains(t, body, "`/petri sleep` from @flaky: given up: it kept failing for 10m; see sync's log")
	e, err := h.get(name)
	require.NoError(t, err)
	assert.NotContains(t, e.Annotations, render.AnnotationSleepRequested)

	// Handled: the passes that follow do not fail for it.
	failed := h.failedReconciles()
	h.resync()
	h.resync()
	assert.Equal(t, failed, h.failedReconciles())
}
