package gitlab_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/sync/provider"
)

// The facts a trigger decides trust on: whether a merge request is from a
// fork, and who last added a label (GitLab's resource label events).
func TestForkAndLabelAdders(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.srv.AddProject("outsider/shop")
	own := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{SourceBranch: "cart", SHA: "aaaa111", Author: "alice"})
	fork := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{SourceBranch: "patch", SourceProject: "outsider/shop", SHA: "cccc333", Author: "outsider"})

	prs, err := f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	got := byNumber(prs)
	assert.False(t, got[own].Fork)
	assert.True(t, got[fork].Fork)
	one, err := f.p.GetPullRequest(ctx, repo, fork)
	require.NoError(t, err)
	assert.True(t, one.Fork)

	var history provider.LabelHistory = f.p
	adders, err := history.LabelAdders(ctx, repo, fork)
	require.NoError(t, err)
	assert.Empty(t, adders, "no label ever added")
	f.srv.AddLabel(repo, fork, "preview", "reporter")
	f.srv.RemoveLabel(repo, fork, "preview", "reporter")
	f.srv.AddLabel(repo, fork, "preview", "maintainer")
	f.srv.AddLabel(repo, fork, "ui", "outsider")
	adders, err = history.LabelAdders(ctx, repo, fork)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"preview": "maintainer", "ui": "outsider"}, adders, "the last to add each")
	pr, err := f.p.GetPullRequest(ctx, repo, fork)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"preview", "ui"}, pr.Labels)
}
