package render_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// TestEnvironmentNameByForge: GitHub's names are what they were before sync
// served other forges (pinned), and names of any forge's repository, however
// long and deeply nested its path, are valid, at most 52 characters and
// distinct per forge.
func TestEnvironmentNameByForge(t *testing.T) {
	nested := strings.Repeat("group-", 20) + "sub/" + strings.Repeat("x", 40) + "/" + strings.Repeat("p", 200-len(strings.Repeat("group-", 20)+"sub/"+strings.Repeat("x", 40)+"/"))
	require.Len(t, nested, 200)
	tests := []struct {
		name, app, forge, repo string
		number                 int
		want                   string
	}{
		{name: "github pinned", app: "shop", forge: "github", repo: "acme/shop", number: 42, want: "shop-pr-42-e8183c"},
		{name: "github default forge pinned", app: "hello", repo: "petri-dev/hello", number: 1, want: "hello-pr-1-6646f4"},
		{name: "github long application pinned", app: "a-very-long-application-name-x", repo: "Acme/Shop", number: 123456, want: "a-very-long-application-name-x-pr-123456-c188be"},
		{name: "gitea", app: "shop", forge: "gitea", repo: "acme/shop", number: 42},
		{name: "forgejo", app: "shop", forge: "forgejo", repo: "acme/shop", number: 42},
		{name: "gitlab nested", app: "shop", forge: "gitlab", repo: "acme/platform/team/shop", number: 42},
		{name: "gitlab 200 characters", app: strings.Repeat("a", 30), forge: "gitlab", repo: nested, number: 2147483647},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := render.EnvironmentName(tt.app, config.RepositoryKey(tt.forge, tt.repo), tt.number)
			if tt.want != "" {
				assert.Equal(t, tt.want, n)
			}
			assert.True(t, dnsLabel.MatchString(n), n)
			assert.LessOrEqual(t, len(n), 52, n)
			assert.Equal(t, n, render.EnvironmentName(tt.app, config.RepositoryKey(tt.forge, strings.ToUpper(tt.repo)), tt.number), "stable across spelling")
			assert.Empty(t, seen[n], "%s collides with %s", n, seen[n])
			seen[n] = tt.name
		})
	}
}

// TestEnvironmentOfGitea: an environment of a Gitea application names its
// forge beside its repository, and the repository's key comes back from
// them; a GitHub environment carries no forge annotation.
func TestEnvironmentOfGitea(t *testing.T) {
	a := app(t, "ttl: 24h\n")
	gh, err := render.Environment(a, pr(7, "preview"), "petri-system", map[string]string{"api": "1.4.2"})
	require.NoError(t, err)
	assert.NotContains(t, gh.Annotations, render.AnnotationForge)
	assert.Equal(t, "acme/shop", render.RepositoryKey(gh.Annotations))

	a.Forge = config.ForgeGitea
	ge, err := render.Environment(a, pr(7, "preview"), "petri-system", map[string]string{"api": "1.4.2"})
	require.NoError(t, err)
	assert.Equal(t, "gitea", ge.Annotations[render.AnnotationForge])
	assert.Equal(t, "acme/shop", ge.Annotations[render.AnnotationRepository])
	assert.Equal(t, "gitea:acme/shop", render.RepositoryKey(ge.Annotations))
	assert.Equal(t, "acme/shop", ge.Spec.Source.Repository)
	assert.NotEqual(t, gh.Name, ge.Name, "acme/shop on GitHub and on Gitea are two repositories")
	assert.Equal(t, render.EnvironmentName(a.Name, "gitea:acme/shop", 7), ge.Name)
}
