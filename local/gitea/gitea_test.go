package gitea

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var srv *Server

func TestMain(m *testing.M) {
	var err error
	if srv, err = Start(Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

func TestServerAnswersAsTheAdministrator(t *testing.T) {
	var v struct {
		Version string `json:"version"`
	}
	require.NoError(t, srv.Call(nil, http.MethodGet, "/version", nil, &v))
	assert.Equal(t, "1.27.3", v.Version, "the version is stamped at link time")

	var me struct {
		Login   string `json:"login"`
		IsAdmin bool   `json:"is_admin"`
	}
	require.NoError(t, srv.Call(nil, http.MethodGet, "/user", nil, &me))
	assert.Equal(t, srv.Admin.Name, me.Login)
	assert.True(t, me.IsAdmin)

	bad := User{Name: srv.Admin.Name, Token: "not-a-token"}
	err := srv.Call(&bad, http.MethodGet, "/user", nil, nil)
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.Status)
	assert.NotContains(t, err.Error(), "not-a-token", "errors never carry a token")
}

func TestRepositoryPullRequestAndComments(t *testing.T) {
	require.NoError(t, srv.CreateOrg("acme"))
	const repo = "acme/shop"
	require.NoError(t, srv.CreateRepository(repo))
	base, err := srv.Push(repo, Commit{Branch: "main", Files: map[string]string{"README.md": "shop\n"}, Message: "Initial commit"})
	require.NoError(t, err)
	head, err := srv.Push(repo, Commit{Branch: "feature", Files: map[string]string{"app.txt": "v1\n"}})
	require.NoError(t, err)
	require.NotEqual(t, base, head)
	head2, err := srv.Push(repo, Commit{Branch: "feature", Files: map[string]string{"app.txt": "v2\n"}})
	require.NoError(t, err)
	_, err = srv.Push(repo, Commit{Branch: "team/slashed", Files: map[string]string{"app.txt": "v3\n"}})
	require.NoError(t, err, "a branch name with a slash")

	n, err := srv.OpenPullRequest(repo, PullRequest{Head: "feature", Title: "Add the app"})
	require.NoError(t, err)
	require.NoError(t, srv.AddLabels(repo, n, "preview", "team-a"))
	require.NoError(t, srv.AddLabels(repo, n, "preview"), "an existing label is reused")
	require.NoError(t, srv.SetStatus(repo, head2, "ci/test", "success"))

	var pr struct {
		Number int    `json:"number"`
		State  string `json:"state"`
		Merged bool   `json:"merged"`
		Head   struct {
			Ref string `json:"ref"`
			SHA string `json:"sha"`
		} `json:"head"`
		Labels []struct {
			Name string `json:"name"`
		} `json:"labels"`
	}
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", repo, n), nil, &pr))
	assert.Equal(t, "feature", pr.Head.Ref)
	assert.Equal(t, head2, pr.Head.SHA, "the second push is the head")
	assert.Len(t, pr.Labels, 2)

	// A second user, a read-only collaborator, comments.
	reader, err := srv.CreateUser("reader")
	require.NoError(t, err)
	require.NoError(t, srv.AddCollaborator(repo, reader.Name, "read"))
	id, err := srv.Comment(&reader, repo, n, "/petri redeploy")
	require.NoError(t, err)
	var comment struct {
		User struct {
			Login string `json:"login"`
		} `json:"user"`
	}
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/issues/comments/%d", repo, id), nil, &comment))
	assert.Equal(t, "reader", comment.User.Login)
	var perm struct {
		Permission string `json:"permission"`
	}
	require.NoError(t, srv.Call(nil, http.MethodGet, "/repos/"+repo+"/collaborators/reader/permission", nil, &perm))
	assert.Equal(t, "read", perm.Permission)

	require.NoError(t, srv.ClosePullRequest(repo, n))
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", repo, n), nil, &pr))
	assert.Equal(t, "closed", pr.State)
	assert.False(t, pr.Merged)
	require.NoError(t, srv.ReopenPullRequest(repo, n))
	require.NoError(t, srv.MergePullRequest(repo, n))
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", repo, n), nil, &pr))
	assert.Equal(t, "closed", pr.State)
	assert.True(t, pr.Merged)
}

func TestForkPullRequest(t *testing.T) {
	const repo = "petri-admin/forked"
	require.NoError(t, srv.CreateRepository(repo))
	_, err := srv.Push(repo, Commit{Branch: "main", Files: map[string]string{"a": "1"}})
	require.NoError(t, err)
	outsider, err := srv.CreateUser("outsider")
	require.NoError(t, err)
	fork, err := srv.Fork(outsider, repo)
	require.NoError(t, err)
	assert.Equal(t, "outsider/forked", fork)
	sha, err := srv.Push(fork, Commit{Branch: "patch", Files: map[string]string{"a": "2"}, As: &outsider})
	require.NoError(t, err)
	n, err := srv.OpenPullRequest(repo, PullRequest{Head: "outsider/forked:patch", Title: "From a fork", As: &outsider})
	require.NoError(t, err)
	var pr struct {
		Head struct {
			SHA  string `json:"sha"`
			Repo struct {
				FullName string `json:"full_name"`
			} `json:"repo"`
		} `json:"head"`
	}
	require.NoError(t, srv.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", repo, n), nil, &pr))
	assert.Equal(t, sha, pr.Head.SHA)
	assert.Equal(t, fork, pr.Head.Repo.FullName)
}

// A server whose starter died is killed and removed by the next Start's
// clean-up; Stop kills a live one and removes its directory.
func TestStopAndStaleCleanUp(t *testing.T) {
	stale, err := Start(Options{AdminName: "stale-admin"})
	require.NoError(t, err)
	t.Cleanup(stale.Stop)
	pid := stale.Pid()
	require.True(t, processAlive(pid))

	// Pretend its starter is gone: the record names a start time no
	// process has.
	data, err := os.ReadFile(stale.pidFile)
	require.NoError(t, err)
	var rec pidRecord
	require.NoError(t, json.Unmarshal(data, &rec))
	rec.OwnerStart = "gone"
	data, err = json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(stale.pidFile, data, 0o600))

	cleanStale()
	require.Eventually(t, func() bool { return !stale.Running() }, 10*time.Second, 20*time.Millisecond)
	assert.NoDirExists(t, stale.Dir)
	assert.NoFileExists(t, stale.pidFile)
	assert.True(t, srv.Running(), "a server whose starter lives is left alone")

	live, err := Start(Options{AdminName: "live-admin"})
	require.NoError(t, err)
	live.Stop()
	assert.False(t, live.Running())
	assert.NoDirExists(t, live.Dir)
	assert.NoFileExists(t, live.pidFile)
	live.Stop() // twice is fine
}

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }
