package webhook_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/webhook"
)

// TestSecretsPerRepository: where a repository (or its owner, or on GitLab
// its group) has a webhook secret of its own, a delivery naming it is
// accepted only when signed with that secret: the admin of another
// repository, who knows the forge-wide secret or their own, cannot forge
// its snapshots. Repositories without one fall back to the forge-wide
// secret, and without that are refused.
func TestSecretsPerRepository(t *testing.T) {
	own, other, wide := []byte("shop-secret"), []byte("other-secret"), []byte("forge-wide")
	byPath := map[string][]byte{"acme/shop": own, "acme/other": other, "platform": other}

	t.Run("github", func(t *testing.T) {
		q := make(chan webhook.Event, 10)
		h := &webhook.Handler{Secret: wide, RepositorySecrets: byPath, Queue: q, Metrics: metrics.New()}
		srv := githubapi.New(githubapi.Options{})
		defer srv.Close()
		deliver := func(repo string, secret []byte) int {
			pr := srv.OpenPullRequest(repo, githubapi.PullRequest{})
			d, err := srv.PullRequestEvent(repo, pr.Number, "opened")
			if !assert.NoError(t, err) {
				return 0
			}
			return post(h, d.Event, "application/json", d.Body, githubapi.Sign(secret, d.Body)).Code
		}
		assert.Equal(t, http.StatusAccepted, deliver("acme/shop", own))
		assert.Equal(t, http.StatusUnauthorized, deliver("acme/shop", other), "signed with another repository's secret")
		assert.Equal(t, http.StatusUnauthorized, deliver("acme/shop", wide), "signed with the forge-wide secret")
		assert.Equal(t, http.StatusAccepted, deliver("ACME/Shop", own), "paths match in any case")
		assert.Equal(t, http.StatusAccepted, deliver("acme/blog", wide), "a repository without its own takes the forge-wide one")
		assert.Equal(t, http.StatusUnauthorized, deliver("acme/blog", own))
		assert.Equal(t, http.StatusAccepted, deliver("platform/api", other), "an owner's secret covers its repositories")
		assert.Equal(t, http.StatusUnauthorized, deliver("platform/api", wide))
		assert.Len(t, q, 4)

		h = &webhook.Handler{RepositorySecrets: byPath, Queue: make(chan webhook.Event, 10), Metrics: metrics.New()}
		pr := srv.OpenPullRequest("acme/blog", githubapi.PullRequest{})
		d, err := srv.PullRequestEvent("acme/blog", pr.Number, "opened")
		assert.NoError(t, err)
		assert.Equal(t, http.StatusUnauthorized, post(h, d.Event, "application/json", d.Body, githubapi.Sign(nil, d.Body)).Code,
			"no forge-wide secret: a repository without its own is refused")
	})

	t.Run("gitea", func(t *testing.T) {
		q := make(chan webhook.Event, 10)
		h := routed(&webhook.Handler{Queue: q, Metrics: metrics.New(),
			Forges: map[string]webhook.Forge{"gitea": webhook.Gitea("gitea", wide, byPath)}})
		deliver := func(repo string, secret []byte) int {
			body := strings.ReplaceAll(giteaPullRequest, `"full_name":"acme/shop"`, `"full_name":"`+repo+`"`)
			return postGitea(h, "/webhooks/gitea", "pull_request", body, giteaSign(secret, body)).Code
		}
		assert.Equal(t, http.StatusAccepted, deliver("acme/shop", own))
		assert.Equal(t, http.StatusUnauthorized, deliver("acme/shop", other), "signed with another repository's secret")
		assert.Equal(t, http.StatusUnauthorized, deliver("acme/shop", wide), "signed with the forge-wide secret")
		assert.Equal(t, http.StatusAccepted, deliver("acme/blog", wide))
		assert.Equal(t, http.StatusAccepted, deliver("platform/api", other))
		assert.Equal(t, http.StatusUnauthorized, deliver("platform/api", own))
		assert.Len(t, q, 3)
	})

	t.Run("gitlab", func(t *testing.T) {
		q := make(chan webhook.Event, 10)
		h := routed(&webhook.Handler{Queue: q, Metrics: metrics.New(),
			Forges: map[string]webhook.Forge{"gitlab": webhook.GitLab(wide, map[string][]byte{"gitlabhq": own, "platform/team": other})}})
		mr := gitlabPayload(t, "merge_request.json")
		assert.Contains(t, mr, `"path_with_namespace":"gitlabhq/gitlab-test"`)
		elsewhere := strings.ReplaceAll(mr, `"path_with_namespace":"gitlabhq/gitlab-test"`, `"path_with_namespace":"platform/team/api"`)
		unowned := strings.ReplaceAll(mr, `"path_with_namespace":"gitlabhq/gitlab-test"`, `"path_with_namespace":"solo/api"`)
		assert.Equal(t, http.StatusAccepted, postGitLab(h, "Merge Request Hook", mr, string(own)).Code, "the group's token")
		assert.Equal(t, http.StatusUnauthorized, postGitLab(h, "Merge Request Hook", mr, string(other)).Code, "another group's token")
		assert.Equal(t, http.StatusUnauthorized, postGitLab(h, "Merge Request Hook", mr, string(wide)).Code, "the forge-wide token")
		assert.Equal(t, http.StatusAccepted, postGitLab(h, "Merge Request Hook", elsewhere, string(other)).Code, "a subgroup's token covers its projects")
		assert.Equal(t, http.StatusUnauthorized, postGitLab(h, "Merge Request Hook", elsewhere, string(own)).Code)
		assert.Equal(t, http.StatusAccepted, postGitLab(h, "Merge Request Hook", unowned, string(wide)).Code)
		assert.Len(t, q, 3)
	})
}
