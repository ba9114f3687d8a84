package gitlab_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/sync/provider"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
)

func TestComments(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{})
	b := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{})
	first := f.srv.AddNote(repo, a, "alice", "/petri redeploy")
	f.srv.AddSystemNote(repo, a, "added 1 commit")
	f.srv.Advance(time.Minute)
	second := f.srv.AddNote(repo, a, "bob", "looks good")

	cs, err := f.p.ListComments(ctx, repo, a)
	require.NoError(t, err)
	require.Len(t, cs, 2, "system notes are no one's comments")
	assert.Equal(t, provider.Comment{ID: first, Number: a, Author: "alice", Body: "/petri redeploy", CreatedAt: start, UpdatedAt: start},
		utc(cs[0]))
	assert.Equal(t, second, cs[1].ID, "oldest first")
	assert.Equal(t, "bob", cs[1].Author)

	// The resync reads notes on merge requests updated since a time.
	f.srv.Advance(10 * time.Minute)
	since := start.Add(5 * time.Minute)
	late := f.srv.AddNote(repo, b, "carol", "/petri keep")
	f.srv.ResetRequests()
	cs, err = f.p.ListRepositoryComments(ctx, repo, since)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, late, cs[0].ID)
	assert.Equal(t, b, cs[0].Number)
	assert.Equal(t, 2, f.count(), "one listing of merge requests updated since, one of the notes of the one that was")
	cs, err = f.p.ListRepositoryComments(ctx, repo, start)
	require.NoError(t, err)
	require.Len(t, cs, 3)
	assert.Equal(t, []int64{first, second, late}, []int64{cs[0].ID, cs[1].ID, cs[2].ID})
}

func utc(c provider.Comment) provider.Comment {
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return c
}

func TestReact(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	n := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{})
	accepted := f.srv.AddNote(repo, n, "alice", "/petri redeploy")
	refused := f.srv.AddNote(repo, n, "mallory", "/petri delete")
	_, err := f.p.ListComments(ctx, repo, n)
	require.NoError(t, err)

	require.NoError(t, f.p.React(ctx, repo, accepted, provider.ReactionAccepted))
	require.NoError(t, f.p.React(ctx, repo, accepted, provider.ReactionAccepted), "the same reaction twice is one")
	require.NoError(t, f.p.React(ctx, repo, refused, provider.ReactionRefused))
	assert.Equal(t, []gitlabapi.Award{
		{NoteID: accepted, Name: "thumbsup", User: bot},
		{NoteID: refused, Name: "thumbsdown", User: bot},
	}, f.srv.Awards(repo))

	// A note never listed is found on a recently updated merge request.
	other := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{})
	fresh := f.srv.AddNote(repo, other, "alice", "/petri sleep")
	require.NoError(t, f.p.React(ctx, repo, fresh, provider.ReactionAccepted))
	assert.Contains(t, f.srv.Awards(repo), gitlabapi.Award{NoteID: fresh, Name: "thumbsup", User: bot})

	// A note deleted since it was read is provider.ErrNotFound.
	f.srv.DeleteNote(repo, refused)
	err = f.p.React(ctx, repo, refused, provider.ReactionAccepted)
	assert.ErrorIs(t, err, provider.ErrNotFound)
	err = f.p.React(ctx, repo, 424242, provider.ReactionAccepted)
	assert.ErrorIs(t, err, provider.ErrNotFound)
}

func TestPermission(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, m := range []struct {
		user      string
		level     int
		state     string
		inherited bool
	}{
		{"owner", gitlabapi.Owner, "", true},
		{"maintainer", gitlabapi.Maintainer, "", false},
		{"developer", gitlabapi.Developer, "", false},
		{"group-developer", gitlabapi.Developer, "", true},
		{"reporter", gitlabapi.Reporter, "", false},
		{"guest", gitlabapi.Guest, "", false},
		{"minimal", 5, "", true},
		{"blocked", gitlabapi.Maintainer, "blocked", false},
	} {
		f.srv.AddMember(repo, m.user, m.level, m.state, m.inherited)
	}
	f.srv.AddUser("stranger")
	for user, want := range map[string]string{
		"owner":           provider.PermissionAdmin,
		"maintainer":      provider.PermissionAdmin,
		"developer":       provider.PermissionWrite,
		"Group-Developer": provider.PermissionWrite,
		"reporter":        provider.PermissionRead,
		"guest":           provider.PermissionRead,
		"minimal":         provider.PermissionNone,
		"blocked":         provider.PermissionNone,
		"stranger":        provider.PermissionNone,
		"nobody-at-all":   provider.PermissionNone,
	} {
		t.Run(user, func(t *testing.T) {
			got, err := f.p.Permission(ctx, repo, user)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
	f.srv.ResetRequests()
	_, err := f.p.Permission(ctx, repo, "developer")
	require.NoError(t, err)
	assert.Equal(t, 2, f.count(), "the username's id and the membership are asked each time")
}

// A username is not an identity: a developer who renames themselves frees
// their old name, and whoever registers it has the permission of the new
// holder (none), not the developer's.
func TestPermissionFollowsTheUsernamesHolderNow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.srv.AddMember(repo, "alice", gitlabapi.Developer, "", false)
	got, err := f.p.Permission(ctx, repo, "alice")
	require.NoError(t, err)
	require.Equal(t, provider.PermissionWrite, got)

	f.srv.RenameUser("alice", "alice2")
	f.srv.AddUser("alice")
	got, err = f.p.Permission(ctx, repo, "alice")
	require.NoError(t, err)
	assert.Equal(t, provider.PermissionNone, got, "the new alice is no member")
	got, err = f.p.Permission(ctx, repo, "alice2")
	require.NoError(t, err)
	assert.Equal(t, provider.PermissionWrite, got, "the renamed developer keeps their access")
}

func TestDeployments(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const env = "petri/shop-pr-1"
	n := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{SourceBranch: "cart", SHA: "sha-one"})
	f.srv.AddProject("outsider/shop")
	fork := f.srv.OpenMergeRequest(repo, gitlabapi.MergeRequest{SourceBranch: "patch", SourceProject: "outsider/shop", SHA: "sha-fork"})
	_, err := f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)

	id, err := f.p.FindDeployment(ctx, repo, "sha-one", env)
	require.NoError(t, err)
	assert.Zero(t, id)
	// Someone else's deployment of that commit to that environment is
	// theirs: never found, so never driven or deactivated.
	f.srv.AddMember(repo, "mallory", gitlabapi.Developer, "", false)
	other, err := glprovider.New(glprovider.Options{BaseURL: f.srv.URL, Token: "glpat-other", Clock: f.clock,
		HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	require.NoError(t, err)
	_, err = other.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	_, err = other.CreateDeployment(ctx, repo, provider.Deployment{SHA: "sha-one", Environment: env})
	require.NoError(t, err)
	id, err = f.p.FindDeployment(ctx, repo, "sha-one", env)
	require.NoError(t, err)
	assert.Zero(t, id, "another user's deployment is not sync's")
	one, err := f.p.CreateDeployment(ctx, repo, provider.Deployment{SHA: "sha-one", Environment: env, Description: "Preview"})
	require.NoError(t, err)
	_, err = other.CreateDeployment(ctx, repo, provider.Deployment{SHA: "sha-one", Environment: env})
	require.NoError(t, err)
	id, err = f.p.FindDeployment(ctx, repo, "sha-one", env)
	require.NoError(t, err)
	assert.Equal(t, one, id, "sync's own, though another's is newer")
	ours := func() []gitlabapi.Deployment {
		var ds []gitlabapi.Deployment
		for _, d := range f.srv.Deployments(repo) {
			if d.User == bot {
				ds = append(ds, d)
			}
		}
		return ds
	}

	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, one, provider.DeploymentStatus{State: "in_progress"}))
	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, one, provider.DeploymentStatus{State: "success", EnvironmentURL: "https://shop-pr-1.example"}))
	// A redeploy in place does not take a finished deployment back.
	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, one, provider.DeploymentStatus{State: "in_progress"}))
	ds := ours()
	require.Len(t, ds, 1)
	assert.Equal(t, gitlabapi.Deployment{ID: one, Environment: env, Ref: "cart", SHA: "sha-one", Status: "success", User: bot}, ds[0])
	envs := f.srv.Environments(repo)
	require.Len(t, envs, 1)
	assert.Equal(t, "https://shop-pr-1.example", envs[0].ExternalURL, "the environment's URL")
	assert.Equal(t, "available", envs[0].State)

	// A new head commit: the deployment before is superseded, and its
	// inactive status leaves the environment to the new one.
	f.srv.UpdateMergeRequest(repo, n, func(mr *gitlabapi.MergeRequest) { mr.SHA = "sha-two" })
	_, err = f.p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	two, err := f.p.CreateDeployment(ctx, repo, provider.Deployment{SHA: "sha-two", Environment: env})
	require.NoError(t, err)
	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, one, provider.DeploymentStatus{State: "inactive", Description: "Superseded"}))
	assert.Equal(t, "available", f.srv.Environments(repo)[0].State)
	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, two, provider.DeploymentStatus{State: "failure"}))

	// Torn down: the newest deployment goes inactive and the environment
	// is stopped, once.
	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, two, provider.DeploymentStatus{State: "inactive", Description: "Environment deleted"}))
	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, two, provider.DeploymentStatus{State: "inactive", Description: "Environment deleted"}))
	assert.Equal(t, "stopped", f.srv.Environments(repo)[0].State)
	ds = ours()
	require.Len(t, ds, 2)
	assert.Equal(t, "success", ds[0].Status)
	assert.Equal(t, "failed", ds[1].Status)

	// A deployment still running when torn down is canceled.
	three, err := f.p.CreateDeployment(ctx, repo, provider.Deployment{SHA: "sha-fork", Environment: "petri/shop-pr-2"})
	require.NoError(t, err)
	require.NoError(t, f.p.SetDeploymentStatus(ctx, repo, three, provider.DeploymentStatus{State: "inactive"}))
	ds = ours()
	assert.Equal(t, gitlabapi.Deployment{ID: three, Environment: "petri/shop-pr-2", Ref: "refs/merge-requests/2/head",
		SHA: "sha-fork", Status: "canceled", User: bot}, ds[2], "a fork's head is reached by the merge request's ref")
	assert.Equal(t, 2, fork)
	assert.Error(t, f.p.SetDeploymentStatus(ctx, repo, three, provider.DeploymentStatus{State: "queued"}))
}
