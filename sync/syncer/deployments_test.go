package syncer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/render"
)

// With deployments: true each environment is a GitHub deployment of its
// head commit, whose statuses follow it; a push makes a new one (the old
// one inactive), closing makes it inactive; a new sync process neither
// creates a second deployment nor repeats a status.
func TestGitHubDeployments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("deployments: true\n")})
	pr, name := h.deployed()
	environment := fmt.Sprintf("petri/shop-pr-%d", pr.Number)
	statesOf := func(id int64) []string {
		var out []string
		for _, st := range h.gh.DeploymentStatuses(ghRepo, id) {
			out = append(out, st.State)
		}
		return out
	}
	var first githubapi.Deployment
	require.Eventually(t, func() bool {
		ds := h.gh.Deployments(ghRepo)
		if len(ds) != 1 {
			return false
		}
		first = ds[0]
		return len(statesOf(first.ID)) == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, pr.HeadSHA, first.Ref)
	assert.Equal(t, environment, first.Environment)
	assert.True(t, first.TransientEnvironment)
	assert.False(t, first.ProductionEnvironment)
	require.NotNil(t, first.AutoMerge)
	assert.False(t, *first.AutoMerge)
	require.NotNil(t, first.RequiredContexts)
	assert.Empty(t, *first.RequiredContexts)
	assert.Equal(t, []string{"in_progress"}, statesOf(first.ID))

	readyNow(t, h, name)
	require.Eventually(t, func() bool { return len(statesOf(first.ID)) == 2 }, 10*time.Second, 10*time.Millisecond)
	sts := h.gh.DeploymentStatuses(ghRepo, first.ID)
	assert.Equal(t, "success", sts[1].State)
	assert.Equal(t, fmt.Sprintf("https://pr-%d.shop.test", pr.Number), sts[1].EnvironmentURL)

	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.Phase = petriv1.EnvironmentFailed
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed, ObservedGeneration: e.Generation})
		e.Status.Components[1] = petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, LastError: "ImagePullBackOff: web:abc", Job: "web-deploy-job"}
	})
	require.Eventually(t, func() bool { return len(statesOf(first.ID)) == 3 }, 10*time.Second, 10*time.Millisecond)
	sts = h.gh.DeploymentStatuses(ghRepo, first.ID)
	assert.Equal(t, "failure", sts[2].State)
	assert.Equal(t, "Deploy failed: web: ImagePullBackOff: web:abc", sts[2].Description)

	// A new sync process: no second deployment, no repeated status. The
	// state it reads back is what the comment records; the process is
	// stopped once the comment has the failure (a process stopped between
	// posting a status and recording it posts it again: at least once).
	require.Eventually(t, func() bool {
		state, ok := render.ParseState(h.comment(pr.Number))
		return ok && state.Apps["shop"] != nil && state.Apps["shop"].DeploymentState == "failure"
	}, 10*time.Second, 10*time.Millisecond, "the comment records the failure")
	h.restart()
	h.resync()
	h.prEvent(pr.Number, "assigned")
	h.resync()
	assert.Len(t, h.gh.Deployments(ghRepo), 1)
	assert.Equal(t, []string{"in_progress", "success", "failure"}, statesOf(first.ID))

	// A push: a deployment of the new commit, the old one inactive.
	second := githubapi.SHA("deploy again")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = second })
	h.prEvent(pr.Number, "synchronize")
	var next githubapi.Deployment
	require.Eventually(t, func() bool {
		ds := h.gh.Deployments(ghRepo)
		if len(ds) != 2 {
			return false
		}
		next = ds[1]
		return len(statesOf(next.ID)) == 1 && len(statesOf(first.ID)) == 4
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, second, next.Ref)
	assert.Equal(t, "inactive", statesOf(first.ID)[3])
	assert.Equal(t, []string{"in_progress"}, statesOf(next.ID))

	// Closed: inactive.
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(pr.Number, "closed")
	h.waitGone(name)
	require.Eventually(t, func() bool {
		st := statesOf(next.ID)
		return len(st) == 2 && st[1] == "inactive"
	}, 10*time.Second, 10*time.Millisecond, "%v", statesOf(next.ID))
	last := h.gh.DeploymentStatuses(ghRepo, next.ID)[1]
	assert.Equal(t, "Environment deleted: pull request closed", last.Description)
}
