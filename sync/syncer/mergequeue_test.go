package syncer_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
)

// queue sends the merge_group delivery of action for a pull request at its
// head and returns the merge group's commit.
func (h *harness) queue(number int, action string) string {
	h.t.Helper()
	sha, err := h.gh.MergeGroupSHA(ghRepo, number)
	require.NoError(h.t, err)
	d, err := h.gh.MergeGroupEvent(ghRepo, number, action)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusAccepted, h.send(d))
	return sha
}

// latestStatus is the last status posted on a commit in context
// petri/shop.
func latestStatus(gh *githubapi.Server, sha string) githubapi.Status {
	var out githubapi.Status
	for _, st := range gh.Statuses(ghRepo, sha) {
		if st.Context == "petri/shop" {
			out = st
		}
	}
	return out
}

func failed(e *petriv1.EphemeralEnvironment) {
	ready(e)
	e.Status.Phase = petriv1.EnvironmentFailed
	meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed, Message: "web failed", ObservedGeneration: e.Generation})
	e.Status.Components[1] = petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, LastError: "ImagePullBackOff: web:abc"}
}

// mergeGroups is what a pull request's PullRequestState remembers of its
// merge groups.
func (h *harness) mergeGroups(number int) []string {
	if st := h.state(ghRepo, number); st != nil {
		return st.Spec.MergeGroups
	}
	return nil
}

// By default an application's status on a merge group is a success posted
// at once, on the group's commit, in the context of the pull request's
// status: with an environment (Deploying) and without one (no trigger
// label). No environment is made for the group, nor for a pull request of
// the queue's own gh-readonly-queue/ branch, whatever its labels. With
// mergeQueue off nothing is posted on the group.
func TestMergeQueueSuccessMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr, _ := h.deployed()
	plain := h.open(githubapi.PullRequest{})
	for _, n := range []int{pr.Number, plain.Number} {
		group := h.queue(n, "checks_requested")
		require.Eventually(t, func() bool { return latestStatus(h.gh, group).State == "success" }, 10*time.Second, 10*time.Millisecond, "#%d", n)
		assert.Equal(t, "Merge queue: no preview needed", latestStatus(h.gh, group).Description)
		assert.Len(t, h.gh.Statuses(ghRepo, group), 1)
	}
	assert.Empty(t, h.mergeGroups(pr.Number), "nothing to remember in success mode")

	queueBranch := "gh-readonly-queue/main/pr-" + itoa(pr.Number) + "-" + pr.HeadSHA
	qpr := h.open(githubapi.PullRequest{HeadRef: queueBranch, Labels: []string{"preview"}})
	h.resync()
	_, err := h.get(envName(qpr.Number))
	assert.Error(t, err, "no environment for the merge queue's branch")
	assert.Equal(t, 1, h.envCount())
	assert.Empty(t, h.gh.Statuses(ghRepo, qpr.HeadSHA))

	// off: nothing on the group, by the time the pull request's own
	// status says Ready (its feedback took the group before).
	h.pushConfig(shopFiles("mergeQueue: off\n"))
	off := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(off.Number), nil)
	group := h.queue(off.Number, "checks_requested")
	setStatus(t, h, envName(off.Number), ready)
	require.Eventually(t, func() bool { return latestStatus(h.gh, off.HeadSHA).State == "success" }, 10*time.Second, 10*time.Millisecond)
	assert.Empty(t, h.gh.Statuses(ghRepo, group))
}

// In environment mode the merge group's status follows the pull request's
// environment at its head: pending while it deploys (the group remembered
// in the PullRequestState), success only once it is Ready, and then
// forgotten; a failed environment is a failure on its group.
func TestMergeQueueEnvironmentMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("mergeQueue: environment\n")})
	pr, name := h.deployed()
	group := h.queue(pr.Number, "checks_requested")
	require.Eventually(t, func() bool { return latestStatus(h.gh, group).State == "pending" }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, latestStatus(h.gh, group).Description, "Merge queue")
	require.Eventually(t, func() bool { return slicesEqual(h.mergeGroups(pr.Number), []string{group}) }, 10*time.Second, 10*time.Millisecond)
	h.resync()
	for _, st := range h.gh.Statuses(ghRepo, group) {
		assert.NotEqual(t, "success", st.State, "no success before the environment is Ready")
	}

	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latestStatus(h.gh, group).State == "success" }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, latestStatus(h.gh, group).Description, "Environment ready")
	assert.Equal(t, "success", latestStatus(h.gh, pr.HeadSHA).State)
	require.Eventually(t, func() bool { return len(h.mergeGroups(pr.Number)) == 0 }, 10*time.Second, 10*time.Millisecond, "posted for good: forgotten")

	other := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(other.Number), nil)
	failing := h.queue(other.Number, "checks_requested")
	require.Eventually(t, func() bool { return latestStatus(h.gh, failing).State == "pending" }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, envName(other.Number), failed)
	require.Eventually(t, func() bool { return latestStatus(h.gh, failing).State == "failure" }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, latestStatus(h.gh, failing).Description, "ImagePullBackOff")
	assert.Equal(t, 2, h.envCount(), "no environment for a merge group")
}

// A destroyed merge group is forgotten: the environment that becomes
// Ready afterwards posts on the pull request, never on the group.
func TestMergeQueueDestroyedStopsPosting(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("mergeQueue: environment\n")})
	pr, name := h.deployed()
	group := h.queue(pr.Number, "checks_requested")
	require.Eventually(t, func() bool { return slicesEqual(h.mergeGroups(pr.Number), []string{group}) }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return latestStatus(h.gh, group).State == "pending" }, 10*time.Second, 10*time.Millisecond)
	posted := len(h.gh.Statuses(ghRepo, group))

	h.queue(pr.Number, "destroyed")
	require.Eventually(t, func() bool { return len(h.mergeGroups(pr.Number)) == 0 }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latestStatus(h.gh, pr.HeadSHA).State == "success" }, 10*time.Second, 10*time.Millisecond)
	h.resync()
	assert.Len(t, h.gh.Statuses(ghRepo, group), posted, "nothing posted on a destroyed group")
	assert.Equal(t, "pending", latestStatus(h.gh, group).State)
}

// A merge group delivered to the replica that does not lead is a refresh
// mark the leader takes: the leader remembers the group and posts on it
// as the environment deploys and becomes Ready; the follower calls GitHub
// for nothing.
func TestMergeGroupToTheFollowerIsActedOnByTheLeader(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles("mergeQueue: environment\n"))
	h := rs.h
	a, b := rs.leaderAndFollower(nil)

	pr := openPR(t, h.gh, a)
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	group, err := h.gh.MergeGroupSHA(ghRepo, pr.Number)
	require.NoError(t, err)
	d, err := h.gh.MergeGroupEvent(ghRepo, pr.Number, "checks_requested")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, b.send(t, d))
	require.Eventually(t, func() bool { return latestStatus(h.gh, group).State == "pending" }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(rs.pending()) == 0 }, 10*time.Second, 10*time.Millisecond, "the leader removes what it took: %v", rs.pending())
	b.recorded(t, "recorded", 1)

	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool { return latestStatus(h.gh, group).State == "success" }, 10*time.Second, 10*time.Millisecond)
	assert.Zero(t, b.total(t, "petri_sync_github_requests_total"), "the follower called GitHub for nothing")
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// A leader that stops before it could post on a merge group (GitHub
// refused the status) hands the group to the next leader, which posts it:
// no resync would find a merge group again.
func TestStoppingLeaderHandsOverItsMergeGroups(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	h := rs.h
	a, b := rs.leaderAndFollower(nil)
	pr := openPR(t, h.gh, a)
	h.waitEnv(envName(pr.Number), nil)
	group, err := h.gh.MergeGroupSHA(ghRepo, pr.Number)
	require.NoError(t, err)
	h.gh.SetFault(&githubapi.Fault{Status: http.StatusBadGateway, Match: func(r *http.Request) bool { return strings.Contains(r.URL.Path, group) }})
	d, err := h.gh.MergeGroupEvent(ghRepo, pr.Number, "checks_requested")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, a.send(t, d))
	require.Eventually(t, func() bool {
		for _, r := range h.gh.Requests() {
			if strings.Contains(r.Path, group) && r.Status == http.StatusBadGateway {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the leader tried to post on the group")

	a.stop(t)
	h.gh.SetFault(nil)
	rs.waitLeader(b, 20*time.Second)
	require.Eventually(t, func() bool { return latestStatus(h.gh, group).State == "success" }, 20*time.Second, 10*time.Millisecond)
	assert.Equal(t, "Merge queue: no preview needed", latestStatus(h.gh, group).Description)
}
