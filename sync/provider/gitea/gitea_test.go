package gitea_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/sync/provider"
	giteaprovider "github.com/petri-dev/petri/sync/provider/gitea"
)

// wall is the real clock, read by name where a test needs the time.
var wall = clock.RealClock{}

// The tests share one real Gitea: an organisation acme whose repository
// acme/shop has sync's identity petri-bot as an administrator, a writer and
// a reader as collaborators, and an outsider with no grant.
var (
	srv                          *gitea.Server
	bot, writer, reader, outside gitea.User
)

const repo = "acme/shop"

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if srv, err = gitea.Start(gitea.Options{}); err != nil {
		return 0, err
	}
	defer srv.Stop()
	if err := srv.CreateOrg("acme"); err != nil {
		return 0, err
	}
	if err := srv.CreateRepository(repo); err != nil {
		return 0, err
	}
	if _, err := srv.Push(repo, gitea.Commit{Branch: "main", Files: map[string]string{"README.md": "shop\n"}, Message: "Initial commit"}); err != nil {
		return 0, err
	}
	for _, u := range []struct {
		user *gitea.User
		name string
		perm string
	}{{&bot, "petri-bot", "admin"}, {&writer, "writer", "write"}, {&reader, "reader", "read"}, {&outside, "outsider", ""}} {
		if *u.user, err = srv.CreateUser(u.name); err != nil {
			return 0, err
		}
		if u.perm != "" {
			if err := srv.AddCollaborator(repo, u.name, u.perm); err != nil {
				return 0, err
			}
		}
	}
	// Sync's token has the scopes docs/forges.md names, and no others.
	if bot.Token, err = srv.CreateToken(bot, "petri-sync", "write:repository", "write:issue", "read:user"); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

func newProvider(t *testing.T) *giteaprovider.Provider {
	t.Helper()
	p, err := giteaprovider.New(giteaprovider.Options{BaseURL: srv.URL, Token: bot.Token, HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	require.NoError(t, err)
	return p
}

// openPR pushes a branch with one commit and opens a pull request from it.
func openPR(t *testing.T, branch, title string) (int, string) {
	t.Helper()
	sha, err := srv.Push(repo, gitea.Commit{Branch: branch, Files: map[string]string{branch + ".txt": branch}})
	require.NoError(t, err)
	n, err := srv.OpenPullRequest(repo, gitea.PullRequest{Head: branch, Title: title})
	require.NoError(t, err)
	return n, sha
}

func TestPullRequests(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	ready, readySHA := openPR(t, "pr-ready", "Add the cart")
	require.NoError(t, srv.AddLabels(repo, ready, "preview", "team-a"))
	wip, _ := openPR(t, "pr-wip", "WIP: checkout")
	bracket, _ := openPR(t, "pr-bracket", "[wip] payments")
	closed, _ := openPR(t, "pr-closed", "Abandoned")
	require.NoError(t, srv.ClosePullRequest(repo, closed))
	merged, _ := openPR(t, "pr-merged", "Merged one")
	require.NoError(t, srv.MergePullRequest(repo, merged))

	// A pull request from a fork names the fork's branch and head commit.
	fork, err := srv.Fork(outside, repo)
	require.NoError(t, err)
	forkSHA, err := srv.Push(fork, gitea.Commit{Branch: "patch", Files: map[string]string{"fix.txt": "fix"}, As: &outside})
	require.NoError(t, err)
	fromFork, err := srv.OpenPullRequest(repo, gitea.PullRequest{Head: fork + ":patch", Title: "Fix from a fork", As: &outside})
	require.NoError(t, err)

	prs, err := p.ListOpenPullRequests(ctx, repo)
	require.NoError(t, err)
	byNumber := map[int]provider.PullRequest{}
	for _, pr := range prs {
		byNumber[pr.Number] = pr
	}
	require.Contains(t, byNumber, ready)
	assert.NotContains(t, byNumber, closed, "closed pull requests are not listed")
	assert.NotContains(t, byNumber, merged)

	got := byNumber[ready]
	assert.Equal(t, repo, got.Repository)
	assert.Equal(t, "open", got.State)
	assert.True(t, got.Open())
	assert.False(t, got.Draft)
	assert.Equal(t, "Add the cart", got.Title)
	assert.Equal(t, srv.Admin.Name, got.Author)
	assert.Equal(t, "pr-ready", got.HeadBranch)
	assert.Equal(t, readySHA, got.HeadSHA)
	assert.Equal(t, "main", got.BaseBranch)
	assert.ElementsMatch(t, []string{"preview", "team-a"}, got.Labels)
	assert.Equal(t, fmt.Sprintf("%s/%s/pulls/%d", srv.URL, repo, ready), got.URL)
	assert.False(t, got.CreatedAt.IsZero())

	assert.True(t, byNumber[wip].Draft, "WIP: marks a draft")
	assert.True(t, byNumber[bracket].Draft, "[WIP] in any case marks a draft")

	f := byNumber[fromFork]
	assert.Equal(t, "patch", f.HeadBranch)
	assert.Equal(t, forkSHA, f.HeadSHA)
	assert.Equal(t, "outsider", f.Author)

	// Dropping the prefix makes it ready, as Gitea's "Remove WIP" does.
	require.NoError(t, srv.EditPullRequest(repo, wip, "checkout", ""))
	again, err := p.GetPullRequest(ctx, repo, wip)
	require.NoError(t, err)
	assert.False(t, again.Draft)

	c, err := p.GetPullRequest(ctx, repo, closed)
	require.NoError(t, err)
	assert.Equal(t, "closed", c.State)
	assert.False(t, c.Merged)
	m, err := p.GetPullRequest(ctx, repo, merged)
	require.NoError(t, err)
	assert.Equal(t, "closed", m.State)
	assert.True(t, m.Merged)

	_, err = p.GetPullRequest(ctx, repo, 9999)
	assert.ErrorIs(t, err, provider.ErrNotFound)
	_, err = p.ListOpenPullRequests(ctx, "acme/missing")
	assert.ErrorIs(t, err, provider.ErrNotFound)
}

func TestGateFromCommitStatuses(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	_, sha := openPR(t, "gate", "Gated")
	gate := provider.Gate{StatusContext: "ci/test"}

	state, reason, err := p.GateState(ctx, repo, sha, gate)
	require.NoError(t, err)
	assert.Equal(t, provider.GatePending, state, "no status yet")
	assert.Contains(t, reason, "waiting for status ci/test")

	require.NoError(t, srv.SetStatus(repo, sha, "ci/lint", "failure"))
	require.NoError(t, srv.SetStatus(repo, sha, "ci/test", "pending"))
	state, _, err = p.GateState(ctx, repo, sha, gate)
	require.NoError(t, err)
	assert.Equal(t, provider.GatePending, state, "another context's failure is not the gate's")

	require.NoError(t, srv.SetStatus(repo, sha, "ci/test", "success"))
	state, reason, err = p.GateState(ctx, repo, sha, gate)
	require.NoError(t, err)
	assert.Equal(t, provider.GatePassed, state)
	assert.Equal(t, "status ci/test succeeded on "+sha[:7], reason)

	for _, s := range []string{"failure", "error", "warning"} {
		require.NoError(t, srv.SetStatus(repo, sha, "ci/test", s))
		state, reason, err = p.GateState(ctx, repo, sha, gate)
		require.NoError(t, err)
		assert.Equal(t, provider.GateFailed, state, s)
		assert.Contains(t, reason, "is "+s)
	}

	_, _, err = p.GateState(ctx, repo, sha, provider.Gate{CheckRun: "build"})
	assert.ErrorIs(t, err, giteaprovider.ErrNoCheckRuns)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

type status struct {
	State       string `json:"status"`
	Context     string `json:"context"`
	Description string `json:"description"`
	TargetURL   string `json:"target_url"`
	Creator     struct {
		Login string `json:"login"`
	} `json:"creator"`
}

func statuses(t *testing.T, sha string) []status {
	t.Helper()
	var out []status
	require.NoError(t, srv.Call(nil, http.MethodGet, "/repos/"+repo+"/commits/"+sha+"/statuses?limit=50", nil, &out))
	return out
}

func TestCommitStatusIsNotRepeated(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	_, sha := openPR(t, "status", "Status")
	st := provider.CommitStatus{State: "pending", Context: "petri/shop", Description: "Deploying", TargetURL: "http://127.0.0.1:1/env/shop-1"}
	require.NoError(t, p.SetCommitStatus(ctx, repo, sha, st))
	require.NoError(t, p.SetCommitStatus(ctx, repo, sha, st))
	got := statuses(t, sha)
	require.Len(t, got, 1, "the same status is posted once")
	assert.Equal(t, "pending", got[0].State)
	assert.Equal(t, "petri/shop", got[0].Context)
	assert.Equal(t, "Deploying", got[0].Description)
	assert.Equal(t, st.TargetURL, got[0].TargetURL)
	assert.Equal(t, "petri-bot", got[0].Creator.Login)

	st.State, st.Description = "success", "Ready"
	require.NoError(t, p.SetCommitStatus(ctx, repo, sha, st))
	require.NoError(t, p.SetCommitStatus(ctx, repo, sha, provider.CommitStatus{State: "success", Context: "petri/api", Description: "Ready"}))
	assert.Len(t, statuses(t, sha), 3)
	state, _, err := p.GateState(ctx, repo, sha, provider.Gate{StatusContext: "petri/shop"})
	require.NoError(t, err)
	assert.Equal(t, provider.GatePassed, state)
}

type comment struct {
	ID   int64  `json:"id"`
	Body string `json:"body"`
	User struct {
		Login string `json:"login"`
	} `json:"user"`
}

func comments(t *testing.T, number int) []comment {
	t.Helper()
	var out []comment
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/issues/%d/comments", repo, number), nil, &out))
	return out
}

// Only a comment the provider's identity wrote is ever edited: a comment
// with the same marker by anyone else stays as it is, and sync writes its
// own.
func TestUpsertCommentEditsOnlyItsOwn(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	n, _ := openPR(t, "comment", "Comment")
	const marker = "<!-- petri:status -->"
	forged := marker + "\nEnvironment ready at http://evil.example"
	forgedID, err := srv.Comment(&writer, repo, n, forged)
	require.NoError(t, err)

	require.NoError(t, p.UpsertComment(ctx, repo, n, marker, marker+"\nDeploying"))
	cs := comments(t, n)
	require.Len(t, cs, 2)
	assert.Equal(t, forgedID, cs[0].ID)
	assert.Equal(t, forged, cs[0].Body, "another user's comment is never edited")
	assert.Equal(t, "petri-bot", cs[1].User.Login)
	ownID := cs[1].ID

	require.NoError(t, p.UpsertComment(ctx, repo, n, marker, marker+"\nReady"))
	require.NoError(t, p.UpsertComment(ctx, repo, n, marker, marker+"\nReady"), "the same body again changes nothing")
	// A provider with nothing remembered (a restarted sync) finds its own
	// comment, not the forged one, by listing.
	fresh := newProvider(t)
	require.NoError(t, fresh.UpsertComment(ctx, repo, n, marker, marker+"\nRedeployed"))
	cs = comments(t, n)
	require.Len(t, cs, 2, "one comment of sync's, edited in place")
	assert.Equal(t, forged, cs[0].Body)
	assert.Equal(t, ownID, cs[1].ID)
	assert.Equal(t, marker+"\nRedeployed", cs[1].Body)

	// Someone deleted sync's comment: the next upsert writes a new one.
	require.NoError(t, srv.Call(nil, http.MethodDelete, fmt.Sprintf("/repos/%s/issues/comments/%d", repo, ownID), nil, nil))
	require.NoError(t, fresh.UpsertComment(ctx, repo, n, marker, marker+"\nGone"))
	cs = comments(t, n)
	require.Len(t, cs, 2)
	assert.NotEqual(t, ownID, cs[1].ID)
	assert.Equal(t, "petri-bot", cs[1].User.Login)
	assert.Equal(t, marker+"\nGone", cs[1].Body)

	self, err := p.Self(ctx)
	require.NoError(t, err)
	assert.Equal(t, "petri-bot", self)
}

func TestCommentsAndReactions(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	before := wall.Now().Add(-time.Second)
	n, _ := openPR(t, "commands", "Commands")
	other, _ := openPR(t, "commands-other", "Other")
	// More than a page (50) of comments.
	var ids []int64
	for i := range 53 {
		as := &reader
		if i%2 == 1 {
			as = &writer
		}
		id, err := srv.Comment(as, repo, n, fmt.Sprintf("comment %d", i))
		require.NoError(t, err)
		ids = append(ids, id)
	}
	otherID, err := srv.Comment(&writer, repo, other, "/petri redeploy")
	require.NoError(t, err)

	cs, err := p.ListComments(ctx, repo, n)
	require.NoError(t, err)
	require.Len(t, cs, 53, "every page")
	for i, c := range cs {
		assert.Equal(t, ids[i], c.ID, "oldest first")
		assert.Equal(t, n, c.Number)
		assert.Equal(t, fmt.Sprintf("comment %d", i), c.Body)
	}
	assert.Equal(t, "reader", cs[0].Author)
	assert.Equal(t, "writer", cs[1].Author)

	all, err := p.ListRepositoryComments(ctx, repo, before)
	require.NoError(t, err)
	found := map[int64]provider.Comment{}
	for _, c := range all {
		found[c.ID] = c
	}
	require.Contains(t, found, otherID)
	assert.Equal(t, other, found[otherID].Number, "the number is read from the comment's issue URL")
	assert.Equal(t, "/petri redeploy", found[otherID].Body)
	assert.Contains(t, found, ids[52])

	later, err := p.ListRepositoryComments(ctx, repo, wall.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Empty(t, later, "nothing updated after since")

	require.NoError(t, p.React(ctx, repo, otherID, provider.ReactionAccepted))
	require.NoError(t, p.React(ctx, repo, otherID, provider.ReactionAccepted), "the same reaction again is fine")
	require.NoError(t, p.React(ctx, repo, ids[0], provider.ReactionRefused))
	var reactions []struct {
		Content string `json:"content"`
		User    struct {
			Login string `json:"login"`
		} `json:"user"`
	}
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/issues/comments/%d/reactions", repo, otherID), nil, &reactions))
	require.Len(t, reactions, 1)
	assert.Equal(t, "+1", reactions[0].Content)
	assert.Equal(t, "petri-bot", reactions[0].User.Login)
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/issues/comments/%d/reactions", repo, ids[0]), nil, &reactions))
	require.Len(t, reactions, 1)
	assert.Equal(t, "-1", reactions[0].Content)
}

func TestPermission(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	for user, want := range map[string]string{
		"reader":                     provider.PermissionRead,
		"writer":                     provider.PermissionWrite,
		"petri-bot":                  provider.PermissionAdmin,
		srv.Admin.Name:               provider.PermissionAdmin,
		"outsider":                   provider.PermissionRead, // anyone may read a public repository
		strings.ToUpper(reader.Name): provider.PermissionRead,
	} {
		got, err := p.Permission(ctx, repo, user)
		require.NoError(t, err, user)
		assert.Equal(t, want, got, user)
	}
	// A login that is no user's (Gitea answers 404) has none.
	got, err := p.Permission(ctx, repo, "nobody-at-all")
	require.NoError(t, err)
	assert.Equal(t, provider.PermissionNone, got)

	// A reader's token cannot see others' permissions: Gitea shows them to
	// repository administrators only.
	asReader, err := giteaprovider.New(giteaprovider.Options{BaseURL: srv.URL, Token: reader.Token})
	require.NoError(t, err)
	_, err = asReader.Permission(ctx, repo, "writer")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "403")
}

// A user deleted after it wrote a command: Gitea keeps the comment and
// shows it as Ghost's, and Ghost, whom Gitea does not know, has no
// permission; the lookup does not fail.
func TestCommandOfADeletedUserHasNoPermission(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	n, _ := openPR(t, "ghost", "Ghost")
	leaving, err := srv.CreateUser("leaving")
	require.NoError(t, err)
	require.NoError(t, srv.AddCollaborator(repo, leaving.Name, "write"))
	id, err := srv.Comment(&leaving, repo, n, "/petri redeploy")
	require.NoError(t, err)
	require.NoError(t, srv.Call(nil, http.MethodDelete, "/admin/users/"+leaving.Name, nil, nil))

	cs, err := p.ListComments(ctx, repo, n)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, id, cs[0].ID)
	assert.Equal(t, "/petri redeploy", cs[0].Body)
	assert.NotEqual(t, leaving.Name, cs[0].Author, "the comment is no longer the deleted user's")
	got, err := p.Permission(ctx, repo, cs[0].Author)
	require.NoError(t, err, "author %q", cs[0].Author)
	assert.Equal(t, provider.PermissionNone, got, "author %q", cs[0].Author)
	got, err = p.Permission(ctx, repo, leaving.Name)
	require.NoError(t, err)
	assert.Equal(t, provider.PermissionNone, got, "nor has the deleted login")
}

func TestDeploymentsAreUnsupported(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	_, err := p.FindDeployment(ctx, repo, "abc", "pr-1")
	assert.ErrorIs(t, err, giteaprovider.ErrNoDeployments)
	_, err = p.CreateDeployment(ctx, repo, provider.Deployment{SHA: "abc", Environment: "pr-1"})
	assert.ErrorIs(t, err, giteaprovider.ErrNoDeployments)
	err = p.SetDeploymentStatus(ctx, repo, 1, provider.DeploymentStatus{State: "success"})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestTokenFileIsReadAgainWhenItChanges(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("wrong\n"), 0o600))
	p, err := giteaprovider.New(giteaprovider.Options{BaseURL: srv.URL, TokenFile: path})
	require.NoError(t, err)
	_, err = p.Self(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401")
	assert.NotContains(t, err.Error(), "wrong", "the token is not in the error")

	// A rotated Secret changes the file (and its time).
	require.NoError(t, os.WriteFile(path, []byte(bot.Token+"\n"), 0o600))
	require.NoError(t, os.Chtimes(path, wall.Now().Add(time.Minute), wall.Now().Add(time.Minute)))
	self, err := p.Self(ctx)
	require.NoError(t, err)
	assert.Equal(t, "petri-bot", self)
}

func TestNewRefusesBadOptions(t *testing.T) {
	for name, opts := range map[string]giteaprovider.Options{
		"no url":     {Token: "t"},
		"not http":   {BaseURL: "ftp://x", Token: "t"},
		"no token":   {BaseURL: "http://127.0.0.1:1"},
		"no file":    {BaseURL: "http://127.0.0.1:1", TokenFile: "/nonexistent/token"},
		"blank file": {BaseURL: "http://127.0.0.1:1", TokenFile: os.DevNull},
	} {
		_, err := giteaprovider.New(opts)
		assert.Error(t, err, name)
	}
}
