package githubapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/githubapi"
)

// What a hostile author does on the stand-in, as on GitHub: their comments
// are edited and deleted with the deliveries GitHub sends, an edit through
// the API is recorded as the token's user's, a fork's pull request names
// the fork as its head, a delivery can be sent again with the same GUID,
// and deployments someone else made carry their creator.
func TestWhatAHostileAuthorDoes(t *testing.T) {
	s := githubapi.New(githubapi.Options{})
	t.Cleanup(s.Close)
	repo := "acme/shop"
	s.OpenPullRequest(repo, githubapi.PullRequest{Number: 1, Author: "forker", HeadRepository: "forker/shop", HeadRef: "main", Title: "bad \xff bytes"})

	c := s.AddComment(repo, 1, "mallory", "Looks good")
	d, err := s.CommentEditedEvent(repo, c.ID, "/petri sleep")
	require.NoError(t, err)
	var p struct {
		Action  string `json:"action"`
		Changes struct {
			Body struct {
				From string `json:"from"`
			} `json:"body"`
		} `json:"changes"`
		Comment struct {
			Body string `json:"body"`
			User struct {
				Login string `json:"login"`
			} `json:"user"`
		} `json:"comment"`
	}
	require.NoError(t, json.Unmarshal(d.Body, &p))
	assert.Equal(t, "edited", p.Action)
	assert.Equal(t, "Looks good", p.Changes.Body.From)
	assert.Equal(t, "/petri sleep", p.Comment.Body)
	assert.Equal(t, "mallory", p.Comment.User.Login)

	req, err := http.NewRequestWithContext(context.Background(), http.MethodPatch, s.URL+"repos/acme/shop/issues/comments/"+jsonID(c.ID), bytes.NewReader([]byte(`{"body":"mine now"}`)))
	require.NoError(t, err)
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	got := s.Comments(repo, 1)
	require.Len(t, got, 1)
	assert.Equal(t, []string{"mallory", githubapi.APIUser}, got[0].Editors, "each edit names its editor")

	d, err = s.DeleteComment(repo, c.ID)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(d.Body, &p))
	assert.Equal(t, "deleted", p.Action)
	assert.Empty(t, s.Comments(repo, 1))

	d, err = s.PullRequestEvent(repo, 1, "opened")
	require.NoError(t, err)
	var pr struct {
		PullRequest struct {
			Title string `json:"title"`
			Head  struct {
				Label string `json:"label"`
				Repo  struct {
					FullName string `json:"full_name"`
					Fork     bool   `json:"fork"`
				} `json:"repo"`
			} `json:"head"`
		} `json:"pull_request"`
	}
	require.NoError(t, json.Unmarshal(d.Body, &pr))
	assert.Equal(t, "forker/shop", pr.PullRequest.Head.Repo.FullName)
	assert.True(t, pr.PullRequest.Head.Repo.Fork)
	assert.Equal(t, "forker:main", pr.PullRequest.Head.Label)
	assert.Equal(t, "bad \uFFFD bytes", pr.PullRequest.Title, "bytes that are not UTF-8 arrive as GitHub's JSON carries them")

	var ids []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ids = append(ids, r.Header.Get("X-GitHub-Delivery")) }))
	t.Cleanup(hook.Close)
	once := d.Identified()
	for i := 0; i < 2; i++ {
		resp, err := once.Send(context.Background(), hook.Client(), hook.URL, nil)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	resp, err = d.Send(context.Background(), hook.Client(), hook.URL, nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Len(t, ids, 3)
	assert.Equal(t, ids[0], ids[1], "a replay has the same GUID")
	assert.NotEqual(t, ids[0], ids[2])

	prod := s.AddDeployment(repo, githubapi.Deployment{Ref: "main"})
	assert.Equal(t, "release-bot", prod.Creator)
	assert.True(t, prod.ProductionEnvironment)
	require.True(t, s.AddDeploymentStatus(repo, prod.ID, githubapi.DeploymentStatus{State: "success"}, "release-bot"))
	sts := s.DeploymentStatuses(repo, prod.ID)
	require.Len(t, sts, 1)
	assert.Equal(t, "release-bot", sts[0].Creator)
}

func jsonID(id int64) string {
	b, _ := json.Marshal(id)
	return string(b)
}
