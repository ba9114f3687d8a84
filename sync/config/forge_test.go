package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/config"
)

// app is a minimal application file with the given forge and repository
// lines (an empty forge line is left out).
func app(name, forge, repository string, extra ...string) []byte {
	var b strings.Builder
	b.WriteString("kind: Application\nname: " + name + "\n")
	if forge != "" {
		b.WriteString("forge: " + forge + "\n")
	}
	b.WriteString("repository: " + repository + "\n")
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	b.WriteString("components:\n  - name: web\n    chart:\n      repository: https://charts.example.com\n      name: web\n      version: 1.0.0\n")
	return []byte(b.String())
}

// nested200 is a GitLab project path of exactly 200 characters in 10
// nested groups.
func nested200() string {
	segs := make([]string, 0, 11)
	for i := range 10 {
		segs = append(segs, strings.Repeat(string(rune('a'+i)), 18))
	}
	p := strings.Join(segs, "/") + "/"
	return p + strings.Repeat("p", 200-len(p))
}

func TestForgeAndRepository(t *testing.T) {
	require.Len(t, nested200(), 200)
	tests := []struct {
		name, forge, repository string
		extra                   []string
		// wantKey is the repository's key; wantErr the start of the
		// file:line error instead.
		wantKey, wantErr string
	}{
		{name: "github by default", repository: "Acme/Shop", wantKey: "acme/shop"},
		{name: "github named", forge: "github", repository: "acme/shop", wantKey: "acme/shop"},
		{name: "gitea", forge: "gitea", repository: "acme/shop.v2", wantKey: "gitea:acme/shop.v2"},
		{name: "forgejo", forge: "forgejo", repository: "acme/shop", wantKey: "forgejo:acme/shop"},
		{name: "gitlab nested", forge: "gitlab", repository: "Group/Sub/project", wantKey: "gitlab:group/sub/project"},
		{name: "gitlab 200 characters", forge: "gitlab", repository: nested200(), wantKey: "gitlab:" + nested200()},
		{name: "unknown forge", forge: "bitbucket", repository: "acme/shop", wantErr: `app.yaml:3: forge: unknown forge "bitbucket"`},
		{name: "nested on github", repository: "acme/sub/shop", wantErr: "app.yaml:3: repository:"},
		{name: "nested on gitea", forge: "gitea", repository: "acme/sub/shop", wantErr: "app.yaml:4: repository:"},
		{name: "gitlab one segment", forge: "gitlab", repository: "shop", wantErr: "app.yaml:4: repository:"},
		{name: "gitlab segment starting with a dot", forge: "gitlab", repository: "acme/.shop", wantErr: "app.yaml:4: repository:"},
		{name: "gitlab too long", forge: "gitlab", repository: nested200() + "/" + strings.Repeat("q", 60), wantErr: "app.yaml:4: repository: 261 characters"},
		{name: "gitea deployments", forge: "gitea", repository: "acme/shop", extra: []string{"deployments: true"}, wantErr: "app.yaml:5: deployments: gitea has no deployments API"},
		{name: "gitlab merge queue", forge: "gitlab", repository: "group/shop", extra: []string{"mergeQueue: environment"}, wantErr: "app.yaml:5: mergeQueue: gitlab sends no merge groups"},
		{name: "forgejo check run", forge: "forgejo", repository: "acme/shop", extra: []string{"artifactGate:", "  checkRun: build"},
			wantErr: "app.yaml:6: artifactGate.checkRun: forgejo has no check runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Load(map[string][]byte{"app.yaml": app("shop", tt.forge, tt.repository, tt.extra...)})
			if tt.wantErr != "" {
				require.Len(t, cfg.Errors, 1)
				assert.True(t, strings.HasPrefix(cfg.Errors[0].Error(), tt.wantErr), "%s", cfg.Errors[0])
				assert.Empty(t, cfg.Applications)
				return
			}
			require.Empty(t, cfg.Errors)
			require.Len(t, cfg.Applications, 1)
			assert.Equal(t, tt.wantKey, cfg.Applications[0].RepositoryKey())
			assert.Equal(t, []string{tt.wantKey}, cfg.Repositories())
			forge, repo := config.SplitRepositoryKey(tt.wantKey)
			assert.Equal(t, cfg.Applications[0].ForgeName(), forge)
			assert.Equal(t, strings.ToLower(tt.repository), repo)
		})
	}
}

// TestSameRepositoryOnTwoForges: acme/shop on GitHub and on Gitea are two
// repositories.
func TestSameRepositoryOnTwoForges(t *testing.T) {
	cfg := config.Load(map[string][]byte{
		"a.yaml": app("on-github", "", "acme/shop"),
		"b.yaml": app("on-gitea", "gitea", "acme/shop"),
	})
	require.Empty(t, cfg.Errors)
	assert.Equal(t, []string{"acme/shop", "gitea:acme/shop"}, cfg.Repositories())
}

// TestDropUnserved: an application on a forge sync has no credentials for
// is a file:line error at its forge line; the others run.
func TestDropUnserved(t *testing.T) {
	cfg := config.Load(map[string][]byte{
		"a.yaml": app("on-github", "", "acme/shop"),
		"b.yaml": app("on-gitlab", "gitlab", "group/sub/shop"),
		"c.yaml": app("on-gitea", "gitea", "acme/shop"),
	})
	require.Empty(t, cfg.Errors)
	cfg.DropUnserved(func(forge string) bool { return forge != config.ForgeGitLab })
	require.Len(t, cfg.Errors, 1)
	assert.Equal(t, "b.yaml:3: forge: repository group/sub/shop is on gitlab, for which sync has no credentials (see -gitlab-url and -gitlab-token-file)", cfg.Errors[0].Error())
	assert.Equal(t, map[string]string{"b.yaml": "on-gitlab"}, cfg.BrokenFiles)
	var names []string
	for _, a := range cfg.Applications {
		names = append(names, a.Name)
	}
	assert.Equal(t, []string{"on-github", "on-gitea"}, names)
}

func TestSplitRepositoryKeyOfGitHub(t *testing.T) {
	forge, repo := config.SplitRepositoryKey("acme/shop")
	assert.Equal(t, config.ForgeGitHub, forge)
	assert.Equal(t, "acme/shop", repo)
}
