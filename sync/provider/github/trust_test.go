package github_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/provider"
)

// The facts a trigger decides trust on: whether a pull request is from a
// fork, who last added a label, and which app posted a check run.
func TestForkLabelAddersAndCheckRunApp(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{})
	defer srv.Close()
	p := newProvider(t, srv, nil)
	ctx := context.Background()

	own := srv.OpenPullRequest(repo, githubapi.PullRequest{Author: "alice"})
	fork := srv.OpenPullRequest(repo, githubapi.PullRequest{Author: "mallory", HeadRepository: "mallory/shop"})
	prs, err := p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	forks := map[int]bool{}
	for _, pr := range prs {
		forks[pr.Number] = pr.Fork
	}
	assert.Equal(t, map[int]bool{own.Number: false, fork.Number: true}, forks)
	got, err := p.GetPullRequest(ctx, repo, fork.Number)
	require.NoError(t, err)
	assert.True(t, got.Fork)

	var history provider.LabelHistory = p
	adders, err := history.LabelAdders(ctx, repo, fork.Number)
	require.NoError(t, err)
	assert.Empty(t, adders, "no label ever added")
	srv.AddLabel(repo, fork.Number, "preview", "triager")
	srv.RemoveLabel(repo, fork.Number, "preview", "triager")
	srv.AddLabel(repo, fork.Number, "preview", "maintainer")
	srv.AddLabel(repo, fork.Number, "ui", "mallory")
	adders, err = history.LabelAdders(ctx, repo, fork.Number)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"preview": "maintainer", "ui": "mallory"}, adders, "the last to add each")

	sha := fork.HeadSHA
	gate := provider.Gate{CheckRun: "build", App: "github-actions"}
	srv.SetCheckRun(repo, sha, githubapi.CheckRun{Name: "build", Status: "completed", Conclusion: "success", App: "mallorys-app"})
	st, reason, err := p.GateState(ctx, repo, sha, gate)
	require.NoError(t, err)
	assert.Equal(t, provider.GatePending, st, "another app's run is not the gate's")
	assert.Equal(t, "waiting for check run build of app github-actions on "+sha[:7], reason)
	st, _, err = p.GateState(ctx, repo, sha, provider.Gate{CheckRun: "build"})
	require.NoError(t, err)
	assert.Equal(t, provider.GatePassed, st, "by name alone, any app's run counts")
	srv.SetCheckRun(repo, sha, githubapi.CheckRun{Name: "build", Status: "completed", Conclusion: "failure", App: "github-actions"})
	st, _, err = p.GateState(ctx, repo, sha, gate)
	require.NoError(t, err)
	assert.Equal(t, provider.GateFailed, st)
	srv.SetCheckRun(repo, sha, githubapi.CheckRun{Name: "build", Status: "completed", Conclusion: "success", App: "github-actions"})
	st, _, err = p.GateState(ctx, repo, sha, gate)
	require.NoError(t, err)
	assert.Equal(t, provider.GatePassed, st)
}
