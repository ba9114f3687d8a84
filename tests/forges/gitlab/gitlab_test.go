// Package gitlab_test plays a pull request's whole life as a merge request
// on the GitLab stand-in (local/gitlabapi), in a project of nested groups:
// the stand-in's merge request, note and pipeline hooks reach sync at
// /webhooks/gitlab with X-Gitlab-Token, and what sync reports (commit
// statuses, its one note, award emoji) is read back from the stand-in.
package gitlab_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stacktest.Main(m, &st, stacktest.Config{Prefix: "forges-gitlab", Setup: func(_ string, _ map[string]string, o *stack.Options) error {
		o.Forge = stack.ForgeGitLab
		return nil
	}}))
}

// TestPullRequestOnGitLab: opened → Ready with GitLab's commit status
// success and one note → pushed (update hook with oldrev) → redeployed in
// place → /petri redeploy refused from a Guest (thumbsdown) and honoured
// from a Developer (thumbsup) → merged → gone, every step driven by the
// stand-in's hooks and checked against its state.
func TestPullRequestOnGitLab(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	res, err := (&stack.GitLabScenario{Stack: st, Report: stack.NewReport(os.Stderr), StepTimeout: 2 * time.Minute}).Run(ctx)
	require.NoError(t, err)

	stacktest.AssertForgeRun(t, res.ForgeRun, render.EnvironmentName("hello", "gitlab:"+stack.GitLabProject, res.Number))
	require.Len(t, res.Statuses, 2)
	for i, s := range res.Statuses {
		assert.Equal(t, "success", s.Status, "status on %s", res.SHAs[i])
		assert.True(t, strings.HasPrefix(s.TargetURL, st.IngressURL+"/"+res.Environment), "target URL %s", s.TargetURL)
	}
	assert.Equal(t, 1, res.SyncNotes, "one note, edited in place")
	assert.Equal(t, "thumbsdown", res.Refused, "a Guest is refused")
	assert.Equal(t, "thumbsup", res.Honoured, "a Developer is honoured")
	assert.Contains(t, res.Note, "deleted")
	t.Logf("GitLab hook → environment written: open %s, push %s", res.Written[0].Round(time.Millisecond), res.Written[1].Round(time.Millisecond))

	// Every hook the stand-in made reached sync and was accepted; the
	// project's path went escaped as one segment.
	require.Eventually(t, func() bool {
		for _, d := range st.GitLab.Server.Deliveries() {
			if d.Status == 0 && d.Err == "" {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "every delivery answered")
	for _, d := range st.GitLab.Server.Deliveries() {
		assert.Contains(t, []int{200, 202}, d.Status, "%s %s delivery %s: %s", d.Event, d.Action, d.UUID, d.Err)
	}
	escaped := false
	for _, r := range st.GitLab.Server.Requests() {
		escaped = escaped || strings.HasPrefix(r.Path, "/api/v4/projects/petri-dev%2Fplatform%2Fhello/")
	}
	assert.True(t, escaped, "sync named the nested project by its escaped path")

}

// TestWebhookToWriteOnGitLab measures how long a push to a merge request
// on the stand-in takes to become the environment's new commit (the
// update hook's delivery, sync's pass and its write).
func TestWebhookToWriteOnGitLab(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	srv := st.GitLab.Server
	branch := "feature/measure"
	iid := srv.OpenMergeRequest(stack.GitLabProject, gitlabapi.MergeRequest{Title: "Measure", SourceBranch: branch,
		SHA: sha(0), Labels: []string{stack.DemoLabel}, Author: st.GitLab.Developer})
	name := render.EnvironmentName("hello", "gitlab:"+stack.GitLabProject, iid)
	written := func() string {
		var e petriv1.EphemeralEnvironment
		if err := st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, &e); err != nil || e.Spec.Source == nil {
			return ""
		}
		return e.Spec.Source.SHA
	}
	require.Eventually(t, func() bool { return written() == sha(0) }, 2*time.Minute, 10*time.Millisecond)
	var env petriv1.EphemeralEnvironment
	require.NoError(t, st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, &env))
	assert.Equal(t, "gitlab", env.Annotations[render.AnnotationForge])
	assert.Equal(t, stack.GitLabProject, env.Spec.Source.Repository)
	assert.Equal(t, branch, env.Spec.Source.Branch)

	const samples = 12
	var took []time.Duration
	for i := range samples {
		start := time.Now()
		srv.Push(stack.GitLabProject, branch, sha(i+1), st.GitLab.Developer)
		require.Eventually(t, func() bool { return written() == sha(i+1) }, time.Minute, 5*time.Millisecond, "push %d", i+1)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[len(took)-1]
	t.Logf("GitLab push → environment written, %d samples: p50 %s, p99 %s (min %s)", samples,
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), took[0].Round(time.Millisecond))
	assert.Less(t, p50, 30*time.Second)

	srv.UpdateMergeRequest(stack.GitLabProject, iid, func(mr *gitlabapi.MergeRequest) { mr.State = "merged" })
	require.Eventually(t, func() bool {
		err := st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, &petriv1.EphemeralEnvironment{})
		return apierrors.IsNotFound(err)
	}, 3*time.Minute, 50*time.Millisecond)
}

// sha is the i-th commit of the measured branch.
func sha(i int) string {
	return strings.Repeat("0", 38) + string(rune('a'+i/16)) + "0123456789abcdef"[i%16:i%16+1]
}
