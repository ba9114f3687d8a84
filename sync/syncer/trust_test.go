package syncer_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
)

// trustFiles is the shop application with lines added to its trigger and
// at its end.
func trustFiles(trigger, extra string) map[string]string {
	app := strings.Replace(appYAML(extra), "  baseBranch: '^main$'\n", "  baseBranch: '^main$'\n"+trigger, 1)
	return map[string]string{"applications/shop.yaml": app}
}

// fork opens a pull request from mallory's fork, without labels.
func (h *harness) fork() githubapi.PullRequest {
	h.t.Helper()
	return h.open(githubapi.PullRequest{Author: "mallory", HeadRepository: "mallory/shop", HeadRef: "feature/x"})
}

// label adds a label as actor and sends its webhook.
func (h *harness) label(n int, label, actor string) {
	h.t.Helper()
	h.gh.AddLabel(ghRepo, n, label, actor)
	h.prEvent(n, "labeled")
}

// unlabel removes a label as actor and sends its webhook.
func (h *harness) unlabel(n int, label, actor string) {
	h.t.Helper()
	h.gh.RemoveLabel(ghRepo, n, label, actor)
	h.prEvent(n, "unlabeled")
}

// absent asserts that, after a full pass, a pull request has no
// environment.
func (h *harness) absent(n int, why string) {
	h.t.Helper()
	h.resync()
	_, err := h.get(envName(n))
	require.Error(h.t, err, why)
}

// By default a pull request from a fork has an environment only once
// someone with write access added its trigger label; one that a writer
// no longer vouches for loses it.
func TestForkNeedsALabelByAWriter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	h.gh.SetPermission(ghRepo, "maintainer", "maintain")
	h.gh.SetPermission(ghRepo, "triager", "triage")

	byTriager, byWriter := h.fork(), h.fork()
	h.label(byTriager.Number, "preview", "triager")
	h.label(byWriter.Number, "preview", "maintainer")
	h.waitEnv(envName(byWriter.Number), nil)
	h.absent(byTriager.Number, "a fork's label added by a triager counts for nothing")

	// What was looked up is remembered: a pass over unchanged pull
	// requests asks no one's permission and reads no label history.
	h.gh.ResetRequests()
	h.resync()
	for _, r := range h.gh.Requests() {
		assert.NotContains(t, r.Path, "/events", "label history read again")
		assert.NotContains(t, r.Path, "/permission", "permission read again")
	}

	// A label set with no record of who added it counts for nothing on a
	// fork; on the repository's own branch, labels are trusted as ever.
	silent := h.open(githubapi.PullRequest{Author: "mallory", HeadRepository: "mallory/shop", Labels: []string{"preview"}})
	own := h.open(githubapi.PullRequest{Author: "alice", Labels: []string{"preview"}})
	h.waitEnv(envName(own.Number), nil)
	h.absent(silent.Number, "no one is known to have added the label")

	// The writer vouches for the first: it gets its environment.
	h.unlabel(byTriager.Number, "preview", "triager")
	h.label(byTriager.Number, "preview", "maintainer")
	h.waitEnv(envName(byTriager.Number), nil)

	// The second's label is taken off and put back by the triager: its
	// environment goes, as one that stops matching does.
	h.unlabel(byWriter.Number, "preview", "maintainer")
	h.gh.AddLabel(ghRepo, byWriter.Number, "preview", "triager")
	h.prEvent(byWriter.Number, "labeled")
	h.waitGone(envName(byWriter.Number))
	h.absent(byWriter.Number, "the triager's label does not bring it back")
}

// forks: always treats forks as the repository's own branches; a change
// to never deletes their environments; a check run gate without an app
// never passes for a fork.
func TestForksAlwaysAndNever(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: trustFiles("  forks: always\n", "")})
	pr := h.fork()
	h.label(pr.Number, "preview", "mallory")
	h.waitEnv(envName(pr.Number), nil)

	h.pushConfig(trustFiles("  forks: never\n", ""))
	h.waitGone(envName(pr.Number))
	h.gh.SetPermission(ghRepo, "maintainer", "admin")
	h.unlabel(pr.Number, "preview", "mallory")
	h.label(pr.Number, "preview", "maintainer")
	h.absent(pr.Number, "forks: never, whoever added the label")

	h.pushConfig(trustFiles("  forks: always\n", "artifactGate:\n  checkRun: build-image\n"))
	h.gh.SetCheckRun(ghRepo, pr.HeadSHA, githubapi.CheckRun{Name: "build-image", Status: "completed", Conclusion: "success", App: "mallorys-app"})
	h.gh.SetCheckRun(ghRepo, pr.HeadSHA, githubapi.CheckRun{Name: "build-image", Status: "completed", Conclusion: "success"})
	h.absent(pr.Number, "a fork passes no check run gate without an app")
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
		return len(sts) > 0 && sts[len(sts)-1].State == "pending" && strings.Contains(sts[len(sts)-1].Description, "artifactGate.app")
	}, 10*time.Second, 10*time.Millisecond)
}

// trigger.authors: a login of the list, or a permission of at least the
// one named.
func TestTriggerAuthors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: trustFiles("  authors:\n    logins: [alice]\n    permission: write\n", "")})
	h.gh.SetPermission(ghRepo, "carol", "write")
	bob := h.open(githubapi.PullRequest{Author: "bob", Labels: []string{"preview"}})
	alice := h.open(githubapi.PullRequest{Author: "alice", Labels: []string{"preview"}})
	carol := h.open(githubapi.PullRequest{Author: "carol", Labels: []string{"preview"}})
	h.waitEnv(envName(alice.Number), nil)
	h.waitEnv(envName(carol.Number), nil)
	h.absent(bob.Number, "bob is not listed and can only read")
}

// A check run gate that names its app passes only on that app's run: one
// of the same name posted by another app does not.
func TestCheckRunGateOfAnApp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("artifactGate:\n  checkRun: build-image\n  app: github-actions\n")})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	other := githubapi.CheckRun{Name: "build-image", Status: "completed", Conclusion: "success", App: "someone-elses-app"}
	h.gh.SetCheckRun(ghRepo, pr.HeadSHA, other)
	h.prEvent(pr.Number, "opened")
	d, err := h.gh.CheckRunEvent(ghRepo, pr.Number, pr.HeadSHA, other)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	h.absent(pr.Number, "another app's run of the gate's name")
	sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
	require.NotEmpty(t, sts)
	assert.Contains(t, sts[len(sts)-1].Description, "check run build-image of app github-actions")

	run := githubapi.CheckRun{Name: "build-image", Status: "completed", Conclusion: "success", App: "github-actions"}
	h.gh.SetCheckRun(ghRepo, pr.HeadSHA, run)
	d, err = h.gh.CheckRunEvent(ghRepo, pr.Number, pr.HeadSHA, run)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	h.waitEnv(envName(pr.Number), func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == pr.HeadSHA })
}
