// Package forges_test plays a pull request's whole life on a real Gitea
// server: Gitea's own webhooks reach sync, and what sync reports is read
// back from Gitea's API.
package forges_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/tests/internal/stacktest"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stacktest.Main(m, &st, stacktest.Config{Prefix: "forges", Setup: func(dir string, _ map[string]string, o *stack.Options) error {
		o.Forge = stack.ForgeGitea
		src := filepath.Join(dir, "config-source")
		if err := os.CopyFS(src, os.DirFS(filepath.Join("..", "..", "examples", "app", "config-repo"))); err != nil {
			return err
		}
		o.ConfigSource = src
		return os.WriteFile(filepath.Join(src, "applications", hostileApp+".yaml"), []byte(hostileApplication), 0o644)
	}}))
}

// TestPullRequestOnGitea: opened → Ready with Gitea's commit status success
// and one comment → pushed → redeployed in place → /petri redeploy refused
// from a stranger and honoured from a writer → merged → gone, every step
// driven by Gitea's own webhooks and checked against Gitea's API.
func TestPullRequestOnGitea(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	res, err := (&stack.GiteaScenario{Stack: st, Report: stack.NewReport(os.Stderr), StepTimeout: 2 * time.Minute}).Run(ctx)
	require.NoError(t, err)

	stacktest.AssertForgeRun(t, res.ForgeRun, render.EnvironmentName("hello", "gitea:"+stack.DemoRepository, res.Number))
	require.Len(t, res.Statuses, 2)
	for i, s := range res.Statuses {
		assert.Equal(t, "success", s.State, "status on %s", res.SHAs[i])
		assert.Equal(t, st.Gitea.Sync.Name, s.Creator.Login)
		assert.True(t, strings.HasPrefix(s.TargetURL, st.IngressURL+"/"+res.Environment), "target URL %s", s.TargetURL)
	}
	assert.Equal(t, 1, res.SyncComments, "one comment, edited in place")
	assert.Equal(t, "-1", res.Refused, "a user without write access is refused")
	assert.Equal(t, "+1", res.Honoured, "a user with write access is honoured")
	assert.Contains(t, res.Comment, "deleted")

	// Merged, its state is forgotten with its environment.
	require.Eventually(t, func() bool { return giteaState(t, res.Number) == nil }, time.Minute, 50*time.Millisecond,
		"the merged pull request's PullRequestState is deleted")
}

// giteaState is sync's PullRequestState of a pull request of the demo
// repository on Gitea, nil when there is none.
func giteaState(t *testing.T, number int) *petriv1.PullRequestState {
	t.Helper()
	var states petriv1.PullRequestStateList
	require.NoError(t, st.Client.List(context.Background(), &states, client.InNamespace(stack.ManagementNamespace)))
	for i, s := range states.Items {
		if s.Spec.Forge == "gitea" && s.Spec.Repository == stack.DemoRepository && s.Spec.Number == int64(number) {
			return &states.Items[i]
		}
	}
	return nil
}

// TestWebhookToWriteOnGitea measures how long a push to a pull request on
// Gitea takes to become the environment's new commit: Gitea's webhook
// delivery, sync's pass and its write.
func TestWebhookToWriteOnGitea(t *testing.T) {
	stacktest.RegisterInputs(t)
	ctx := context.Background()
	srv := st.Gitea.Server
	branch := "feature/measure"
	_, err := srv.Push(stack.DemoRepository, gitea.Commit{Branch: branch, Files: map[string]string{"m.txt": "0"}})
	require.NoError(t, err)
	n, err := srv.OpenPullRequest(stack.DemoRepository, gitea.PullRequest{Head: branch, Title: "Measure"})
	require.NoError(t, err)
	require.NoError(t, srv.AddLabels(stack.DemoRepository, n, stack.DemoLabel))
	name := render.EnvironmentName("hello", "gitea:"+stack.DemoRepository, n)
	sha := func() string {
		var e petriv1.EphemeralEnvironment
		if err := st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, &e); err != nil || e.Spec.Source == nil {
			return ""
		}
		return e.Spec.Source.SHA
	}
	require.Eventually(t, func() bool { return sha() != "" }, 2*time.Minute, 10*time.Millisecond)

	const samples = 12
	var took []time.Duration
	for i := range samples {
		start := time.Now()
		head, err := srv.Push(stack.DemoRepository, gitea.Commit{Branch: branch, Files: map[string]string{"m.txt": fmt.Sprint(i + 1)}})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return sha() == head }, time.Minute, 5*time.Millisecond, "push %d", i+1)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[len(took)-1]
	t.Logf("Gitea push → environment written, %d samples: p50 %s, p99 %s (min %s)", samples,
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), took[0].Round(time.Millisecond))
	assert.Less(t, p50, 30*time.Second)

	// While it is open, sync's state of the pull request names Gitea.
	assert.NotNil(t, giteaState(t, n), "a PullRequestState of gitea:%s#%d", stack.DemoRepository, n)

	require.NoError(t, srv.MergePullRequest(stack.DemoRepository, n))
	require.Eventually(t, func() bool {
		err := st.Client.Get(ctx, client.ObjectKey{Namespace: stack.ManagementNamespace, Name: name}, &petriv1.EphemeralEnvironment{})
		return apierrors.IsNotFound(err)
	}, 3*time.Minute, 50*time.Millisecond)
}
