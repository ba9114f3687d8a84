package gitea_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/sync/provider"
)

// The facts a trigger decides trust on, from a real Gitea: whether a pull
// request is from a fork, and who last added a label (its timeline).
func TestForkAndLabelAdders(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	own, _ := openPR(t, "pr-trust-own", "Own branch")
	// The outsider's fork, made here or by an earlier test.
	fork := outside.Name + "/shop"
	if _, err := srv.Fork(outside, repo); err != nil {
		require.ErrorContains(t, err, "already forked")
	}
	_, err := srv.Push(fork, gitea.Commit{Branch: "trust", Files: map[string]string{"trust.txt": "x"}, As: &outside})
	require.NoError(t, err)
	fromFork, err := srv.OpenPullRequest(repo, gitea.PullRequest{Head: fork + ":trust", Title: "From a fork", As: &outside})
	require.NoError(t, err)

	prs, err := p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	forks := map[int]bool{}
	for _, pr := range prs {
		forks[pr.Number] = pr.Fork
	}
	require.Contains(t, forks, own)
	require.Contains(t, forks, fromFork)
	assert.False(t, forks[own])
	assert.True(t, forks[fromFork])
	got, err := p.GetPullRequest(ctx, repo, fromFork)
	require.NoError(t, err)
	assert.True(t, got.Fork)

	var history provider.LabelHistory = p
	adders, err := history.LabelAdders(ctx, repo, fromFork)
	require.NoError(t, err)
	assert.Empty(t, adders, "no label ever added")
	require.NoError(t, srv.AddLabels(repo, fromFork, "preview"))
	require.NoError(t, srv.RemoveLabel(nil, repo, fromFork, "preview"))
	require.NoError(t, srv.AddLabelsAs(&writer, repo, fromFork, "preview"))
	require.NoError(t, srv.AddLabels(repo, fromFork, "ui"))
	adders, err = history.LabelAdders(ctx, repo, fromFork)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"preview": writer.Name, "ui": srv.Admin.Name}, adders, "the last to add each")
}
