package github_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/provider"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
)

func TestCommentsReactionsAndPermissions(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{Tokens: []string{"tok"}})
	defer srv.Close()
	p := newProvider(t, srv, ghprovider.TokenFile(tokenFile(t, "tok")))
	ctx := context.Background()
	pr := srv.OpenPullRequest(repo, githubapi.PullRequest{})
	other := srv.OpenPullRequest(repo, githubapi.PullRequest{})
	first := srv.AddComment(repo, pr.Number, "alice", "looks good")
	cmd := srv.AddComment(repo, pr.Number, "bob", "/petri sleep")
	elsewhere := srv.AddComment(repo, other.Number, "carol", "/petri wake")

	cs, err := p.ListComments(ctx, repo, pr.Number)
	require.NoError(t, err)
	require.Len(t, cs, 2)
	assert.Equal(t, provider.Comment{ID: cmd.ID, Number: pr.Number, Author: "bob", Body: "/petri sleep", CreatedAt: cmd.CreatedAt, UpdatedAt: cmd.UpdatedAt}, cs[1])
	assert.Equal(t, first.ID, cs[0].ID, "oldest first")

	// The repository's listing names each comment's pull request; since
	// filters by the time of the last update.
	all, err := p.ListRepositoryComments(ctx, repo, time.Time{})
	require.NoError(t, err)
	require.Len(t, all, 3)
	assert.Equal(t, other.Number, all[2].Number)
	assert.Equal(t, elsewhere.ID, all[2].ID)
	none, err := p.ListRepositoryComments(ctx, repo, elsewhere.UpdatedAt.Add(time.Second))
	require.NoError(t, err)
	assert.Empty(t, none)
	srv.ResetRequests()
	_, err = p.ListRepositoryComments(ctx, repo, elsewhere.UpdatedAt.Add(time.Second))
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 1)
	assert.Equal(t, http.StatusNotModified, srv.Requests()[0].Status, "the same since is the same conditional request")
	assert.Contains(t, srv.Requests()[0].Query, "since=")

	// Reactions: the same one twice is one.
	require.NoError(t, p.React(ctx, repo, cmd.ID, provider.ReactionAccepted))
	require.NoError(t, p.React(ctx, repo, cmd.ID, provider.ReactionAccepted))
	require.NoError(t, p.React(ctx, repo, first.ID, provider.ReactionRefused))
	assert.Equal(t, []string{"+1"}, contents(srv.Reactions(repo, cmd.ID)))
	assert.Equal(t, []string{"-1"}, contents(srv.Reactions(repo, first.ID)))
	assert.ErrorIs(t, p.React(ctx, repo, 999999, provider.ReactionAccepted), provider.ErrNotFound)

	// Permissions as GitHub names them: a maintainer has write.
	for role, want := range map[string]string{"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read", "none": "none"} {
		srv.SetPermission(repo, "u-"+role, role)
		got, err := p.Permission(ctx, repo, "u-"+role)
		require.NoError(t, err)
		assert.Equal(t, want, got, role)
	}

	// A user GitHub does not know (an account deleted after it wrote the
	// command) has no permission: its command is refused, not retried.
	srv.SetPermission(repo, "gone", "write")
	srv.DeleteUser("gone")
	got, err := p.Permission(ctx, repo, "gone")
	require.NoError(t, err)
	assert.Equal(t, provider.PermissionNone, got)
}

func contents(rs []githubapi.Reaction) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Content)
	}
	return out
}

func TestDeployments(t *testing.T) {
	t.Parallel()
	srv := githubapi.New(githubapi.Options{Tokens: []string{"tok"}})
	defer srv.Close()
	p := newProvider(t, srv, ghprovider.TokenFile(tokenFile(t, "tok")))
	ctx := context.Background()
	sha := githubapi.SHA("x")

	id, err := p.FindDeployment(ctx, repo, sha, "petri/shop-pr-1")
	require.NoError(t, err)
	assert.Zero(t, id)
	// Someone else's deployment of that commit to that environment is
	// theirs: never found, so never driven or deactivated.
	srv.AddDeployment(repo, githubapi.Deployment{SHA: sha, Environment: "petri/shop-pr-1", Creator: "someone-else"})
	id, err = p.FindDeployment(ctx, repo, sha, "petri/shop-pr-1")
	require.NoError(t, err)
	assert.Zero(t, id, "another creator's deployment is not sync's")
	id, err = p.CreateDeployment(ctx, repo, provider.Deployment{SHA: sha, Environment: "petri/shop-pr-1", Description: "Preview environment shop-pr-1"})
	require.NoError(t, err)
	srv.AddDeployment(repo, githubapi.Deployment{SHA: sha, Environment: "petri/shop-pr-1", Creator: "someone-else"})
	found, err := p.FindDeployment(ctx, repo, sha, "petri/shop-pr-1")
	require.NoError(t, err)
	assert.Equal(t, id, found, "sync's own, though another's is newer")
	other, err := p.FindDeployment(ctx, repo, sha, "petri/other-pr-1")
	require.NoError(t, err)
	assert.Zero(t, other, "another environment's deployment is not this one")

	var ds []githubapi.Deployment
	for _, d := range srv.Deployments(repo) {
		if d.Creator != "someone-else" {
			ds = append(ds, d)
		}
	}
	require.Len(t, ds, 1)
	d := ds[0]
	assert.Equal(t, sha, d.Ref)
	assert.True(t, d.TransientEnvironment)
	assert.False(t, d.ProductionEnvironment)
	require.NotNil(t, d.AutoMerge)
	assert.False(t, *d.AutoMerge)
	require.NotNil(t, d.RequiredContexts)
	assert.Empty(t, *d.RequiredContexts, "no status check is waited for")

	require.NoError(t, p.SetDeploymentStatus(ctx, repo, id, provider.DeploymentStatus{State: "in_progress", Description: "Deploying"}))
	require.NoError(t, p.SetDeploymentStatus(ctx, repo, id, provider.DeploymentStatus{State: "success", EnvironmentURL: "https://pr-1.shop.test"}))
	sts := srv.DeploymentStatuses(repo, id)
	require.Len(t, sts, 2)
	assert.Equal(t, "in_progress", sts[0].State)
	assert.Equal(t, "success", sts[1].State)
	assert.Equal(t, "https://pr-1.shop.test", sts[1].EnvironmentURL)
	assert.Equal(t, "petri/shop-pr-1", sts[1].Environment)
	assert.Error(t, p.SetDeploymentStatus(ctx, repo, id, provider.DeploymentStatus{State: "asleep"}), "GitHub refuses unknown states")
}
