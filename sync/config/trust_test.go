package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/config"
)

// withTrigger is good with lines added to its trigger.
func withTrigger(lines string) string {
	return strings.Replace(good, "  baseBranch: '^main$'\n", "  baseBranch: '^main$'\n"+lines, 1)
}

func TestTrustSettingsDecode(t *testing.T) {
	cfg := config.Load(map[string][]byte{"a.yaml": []byte(good)})
	require.Empty(t, cfg.Errors)
	app := cfg.Applications[0]
	assert.Equal(t, config.ForksLabelByWriter, app.ForksMode(), "forks need a writer unless the application says otherwise")
	assert.Nil(t, app.Trigger.Authors)

	for _, mode := range config.ForksModes {
		cfg := config.Load(map[string][]byte{"a.yaml": []byte(withTrigger("  forks: " + mode + "\n"))})
		require.Empty(t, cfg.Errors, mode)
		assert.Equal(t, mode, cfg.Applications[0].ForksMode())
	}

	src := withTrigger("  authors:\n    logins: [alice, bob]\n    permission: write\n")
	src = strings.Replace(src, "ttl: 72h", "ttl: 72h\nartifactGate:\n  checkRun: build-images\n  app: github-actions", 1)
	cfg = config.Load(map[string][]byte{"a.yaml": []byte(src)})
	require.Empty(t, cfg.Errors)
	app = cfg.Applications[0]
	assert.Equal(t, []string{"alice", "bob"}, app.Trigger.Authors.Logins)
	assert.Equal(t, "write", app.Trigger.Authors.Permission)
	assert.Equal(t, "github-actions", app.ArtifactGate.App)
}

func TestTrustSettingsErrors(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"forks", withTrigger("  forks: sometimes\n"), `apps/x.yaml:9: trigger.forks: unknown value "sometimes": forks must be one of never, labelByWriter, always`},
		{"forks as boolean", withTrigger("  forks: false\n"), `apps/x.yaml:9: trigger.forks: unknown value "false": forks must be one of never, labelByWriter, always`},
		{"authors empty", withTrigger("  authors: {}\n"), `apps/x.yaml:9: trigger.authors: name logins, a permission, or both`},
		{"authors permission", withTrigger("  authors:\n    permission: maintain\n"), `apps/x.yaml:10: trigger.authors.permission: unknown value "maintain": permission must be one of read, write, admin`},
		{"authors login", withTrigger("  authors:\n    logins: ['a b']\n"), `apps/x.yaml:10: trigger.authors.logins[0]: "a b" is not a login`},
		{"authors unknown field", withTrigger("  authors:\n    teams: [core]\n"), `apps/x.yaml:10: trigger.authors.teams: unknown field`},
		{"app without checkRun", strings.Replace(good, "ttl: 72h", "ttl: 72h\nartifactGate:\n  statusContext: ci\n  app: github-actions", 1), `apps/x.yaml:26: artifactGate.app: app names the app that posts a check run: set it with checkRun`},
		{"app off GitHub", strings.Replace(strings.Replace(good, "repository: acme/shop", "forge: gitlab\nrepository: acme/shop", 1), "ttl: 72h", "ttl: 72h\nartifactGate:\n  checkRun: build\n  app: github-actions", 1), `artifactGate.app: gitlab check runs have no app: app is for GitHub`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Load(map[string][]byte{"apps/x.yaml": []byte(tt.content)})
			require.Empty(t, cfg.Applications)
			var got []string
			for _, e := range cfg.Errors {
				got = append(got, e.Error())
			}
			assert.Contains(t, strings.Join(got, "\n"), tt.want)
			assert.Equal(t, "shop", cfg.BrokenFiles["apps/x.yaml"], "the error names its application")
		})
	}
}

func TestMatchesTrust(t *testing.T) {
	load := func(trigger string) *config.Application {
		cfg := config.Load(map[string][]byte{"a.yaml": []byte(withTrigger(trigger))})
		require.Empty(t, cfg.Errors)
		return cfg.Applications[0]
	}
	base := config.PullRequestView{Labels: []string{"preview"}, HeadBranch: "feature/x", BaseBranch: "main", Author: "mallory"}
	fork := base
	fork.Fork = true
	byWriter := &config.Trust{WriterLabels: []string{"preview"}}
	tests := []struct {
		name    string
		trigger string
		pr      config.PullRequestView
		trust   *config.Trust
		match   bool
		reason  string
	}{
		{"own repository needs no writer's label", "", base, nil, true, ""},
		{"fork, label of no known writer", "", fork, nil, false, `label "preview" was not added by someone with write access (pull request from a fork)`},
		{"fork, label of a reader", "", fork, &config.Trust{}, false, `label "preview" was not added by someone with write access (pull request from a fork)`},
		{"fork, label of a writer", "", fork, byWriter, true, ""},
		{"fork, never", "  forks: never\n", fork, byWriter, false, "pull requests from forks have no environment (trigger.forks: never)"},
		{"fork, always", "  forks: always\n", fork, nil, true, ""},
		{"author listed", "  authors:\n    logins: [Mallory]\n", base, nil, true, ""},
		{"author not listed", "  authors:\n    logins: [alice]\n", base, nil, false, "author mallory is not one of trigger.authors"},
		{"author's permission unknown", "  authors:\n    permission: write\n", base, nil, false, "author mallory is not one of trigger.authors"},
		{"author reads only", "  authors:\n    permission: write\n", base, &config.Trust{AuthorPermission: "read"}, false, "author mallory is not one of trigger.authors"},
		{"author writes", "  authors:\n    permission: write\n", base, &config.Trust{AuthorPermission: "admin"}, true, ""},
		{"fork author writes, label by reader", "  authors:\n    permission: write\n", fork, &config.Trust{AuthorPermission: "write"}, false, `label "preview" was not added by someone with write access (pull request from a fork)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr := tt.pr
			pr.Trust = tt.trust
			got := load(tt.trigger).Matches(pr)
			assert.Equal(t, tt.match, got.Match)
			assert.Equal(t, tt.reason, got.Reason)
		})
	}

	cfg := config.Load(map[string][]byte{"a.yaml": []byte(strings.Replace(good, "  labels: [preview]\n", "", 1))})
	require.Empty(t, cfg.Errors)
	got := cfg.Applications[0].Matches(config.PullRequestView{Fork: true, HeadBranch: "feature/x", BaseBranch: "main", Trust: byWriter})
	assert.False(t, got.Match, "without trigger labels no label can vouch for a fork")
	assert.Contains(t, got.Reason, "trigger.labels names none")
}
