package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/config"
)

const good = `kind: Application
name: shop
repository: acme/shop
trigger:
  labels: [preview]
  excludeLabels: [no-preview]
  headBranch: '^feature/'
  baseBranch: '^main$'
components:
  - name: api
    chart:
      repository: oci://registry.example.com/charts
      name: api
      version: "~1.4"
    pullRequestValues:
      tag: "{{ .ShortSHA }}"
  - name: web
    chart:
      repository: https://charts.example.com
      name: web
      version: 2.0.1
    dependsOn: [api]
ttl: 72h
maxEnvironments: 3
url: "https://pr-{{ .Number }}.example.com"
`

func TestExampleConfigRepositoryLoads(t *testing.T) {
	files := map[string][]byte{}
	root := filepath.Join("..", "..", "examples", "config-repo")
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = data
		return err
	}))
	cfg := config.Load(files)
	require.Empty(t, cfg.Errors)
	require.Len(t, cfg.Applications, 2)
	require.Len(t, cfg.SharedWorkloads, 1)
	shop := cfg.Application("shop")
	require.NotNil(t, shop)
	assert.Equal(t, "applications/shop.yaml", shop.File)
	assert.Equal(t, "build-images", shop.ArtifactGate.CheckRun)
	assert.Equal(t, 72*time.Hour, shop.TTL.Duration)
	assert.Equal(t, 10, shop.MaxEnvironments)
	assert.Nil(t, shop.Placement, "shop binds a shared workload: the management cluster")
	docs := cfg.Application("docs-site").Placement
	require.NotNil(t, docs)
	assert.Equal(t, map[string]string{"region": "eu"}, docs.Selector.MatchLabels)
	assert.Equal(t, "500m", docs.Requests.CPU.String())
	assert.Equal(t, "~15.5", cfg.SharedWorkloads[0].Spec.Chart.Version)
	assert.Equal(t, []string{"acme/docs", "acme/shop"}, cfg.Repositories())
	assert.Equal(t, 41, shop.Line("components[1].chart.version"), "later problems still find their line")
	assert.Equal(t, 39, shop.Line("components[1].chart.nothing"))
}

func TestErrorsNameFileLineAndField(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string
	}{
		{"unknown field", strings.Replace(good, "  labels: [preview]", "  lables: [preview]", 1), []string{"apps/x.yaml:5: trigger.lables: unknown field"}},
		{"wrong type", strings.Replace(good, "maxEnvironments: 3", "maxEnvironments: three", 1), []string{`apps/x.yaml:24: maxEnvironments: expected a whole number, got a string "three"`}},
		{"bad constraint", strings.Replace(good, `"~1.4"`, `"~1.x.y.z"`, 1), []string{`apps/x.yaml:14: components[0].chart.version: "~1.x.y.z" is neither an exact version nor a semver constraint`}},
		{"bad regexp", strings.Replace(good, "'^feature/'", "'^(feature'", 1), []string{"apps/x.yaml:7: trigger.headBranch: invalid regular expression"}},
		{"template field", strings.Replace(good, ".ShortSHA", ".ShortSha", 1), []string{"apps/x.yaml:16: components[0].pullRequestValues.tag: template: "}},
		{"unknown dependency", strings.Replace(good, "dependsOn: [api]", "dependsOn: [db]", 1), []string{`apps/x.yaml:22: components[1].dependsOn[0]: "db" is not a component of this application`}},
		{"ttl", strings.Replace(good, "ttl: 72h", "ttl: three days", 1), []string{`apps/x.yaml:23: ttl: "three days" is not a duration`}},
		{"repository", strings.Replace(good, "repository: acme/shop", "repository: shop", 1), []string{`apps/x.yaml:3: repository: "shop" must be a GitHub repository written owner/name`}},
		{"chart repository", strings.Replace(good, "https://charts.example.com", "http://charts.example.com", 1), []string{"apps/x.yaml:19: components[1].chart.repository: "}},
		{"path chart needs exact", strings.Replace(good, "oci://registry.example.com/charts", "/charts/api", 1), []string{"apps/x.yaml:14: components[0].chart.version: \"~1.4\": a chart inside the deployer image needs an exact version"}},
		{"yaml syntax", good + "  - bad: [\n", []string{"apps/x.yaml:25: invalid YAML: did not find expected key"}},
		{"two documents", good + "---\nkind: Application\n", []string{"apps/x.yaml:26: a config file holds exactly one document"}},
		{"unknown kind", "kind: App\nname: x\n", []string{`apps/x.yaml:1: kind: unknown kind "App"`}},
		{"cycle", strings.Replace(strings.Replace(good, "    pullRequestValues:", "    dependsOn: [web]\n    pullRequestValues:", 1), "", "", 1), []string{"components: dependsOn has a cycle: api -> web -> api"}},
		{"sleepAfter", strings.Replace(good, "ttl: 72h", "ttl: 72h\nsleepAfter: -2h", 1), []string{`apps/x.yaml:24: sleepAfter: duration "-2h" must be positive`}},
		{"keepLabel", strings.Replace(good, "ttl: 72h", "ttl: 72h\nkeepLabel: ' keep'", 1), []string{`apps/x.yaml:24: keepLabel: " keep" must be a GitHub label`}},
		{"deployments", strings.Replace(good, "ttl: 72h", "ttl: 72h\ndeployments: yes please", 1), []string{`apps/x.yaml:24: deployments: expected true or false`}},
		{"mergeQueue", strings.Replace(good, "ttl: 72h", "ttl: 72h\nmergeQueue: wait", 1), []string{`apps/x.yaml:24: mergeQueue: unknown value "wait": mergeQueue must be one of success, environment, off`}},
		{"two errors", strings.Replace(strings.Replace(good, "  lables", "", 1), "drafts", "drafts", 1) + "color: blue\n", []string{"apps/x.yaml:26: color: unknown field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Load(map[string][]byte{"apps/x.yaml": []byte(tt.content), "apps/ok.yaml": []byte(strings.Replace(good, "name: shop", "name: other", 1))})
			require.Len(t, cfg.Applications, 1, "the other file keeps working")
			assert.Equal(t, "other", cfg.Applications[0].Name)
			require.NotEmpty(t, cfg.Errors)
			var got []string
			for _, e := range cfg.Errors {
				got = append(got, e.Error())
			}
			for _, w := range tt.want {
				assert.True(t, strings.Contains(strings.Join(got, "\n"), w), "want %q in %q", w, got)
			}
			assert.Contains(t, cfg.BrokenFiles, "apps/x.yaml")
		})
	}
}

func TestLifecycleSettings(t *testing.T) {
	cfg := config.Load(map[string][]byte{"a.yaml": []byte(good)})
	require.Empty(t, cfg.Errors)
	app := cfg.Applications[0]
	assert.Nil(t, app.SleepAfter, "no sleep unless asked")
	assert.False(t, app.Deployments)
	assert.Equal(t, "petri/keep", app.Keep(), "the default keep label")

	cfg = config.Load(map[string][]byte{"a.yaml": []byte(good + "sleepAfter: 90m\nkeepLabel: preview/keep\ndeployments: true\n")})
	require.Empty(t, cfg.Errors)
	app = cfg.Applications[0]
	assert.Equal(t, 90*time.Minute, app.SleepAfter.Duration)
	assert.Equal(t, "preview/keep", app.Keep())
	assert.True(t, app.Deployments)
}

// An application's status on a merge group is success unless it says
// otherwise; every mode reads, and a merge queue's branch never matches a
// trigger, whatever the trigger says.
func TestMergeQueue(t *testing.T) {
	cfg := config.Load(map[string][]byte{"a.yaml": []byte(good)})
	require.Empty(t, cfg.Errors)
	assert.Equal(t, config.MergeQueueSuccess, cfg.Applications[0].MergeQueueMode())
	for _, mode := range config.MergeQueueModes {
		cfg := config.Load(map[string][]byte{"a.yaml": []byte(good + "mergeQueue: " + mode + "\n")})
		require.Empty(t, cfg.Errors, mode)
		assert.Equal(t, mode, cfg.Applications[0].MergeQueueMode())
	}

	everything := strings.Replace(good, "'^feature/'", "'.*'", 1)
	cfg = config.Load(map[string][]byte{"a.yaml": []byte(everything)})
	require.Empty(t, cfg.Errors)
	app := cfg.Applications[0]
	pr := config.PullRequestView{Labels: []string{"preview"}, HeadBranch: "fix/readme", BaseBranch: "main"}
	require.True(t, app.Matches(pr).Match)
	pr.HeadBranch = "gh-readonly-queue/main/pr-104-929f8209d40f77f4abc622a499c93a83babdbe64"
	m := app.Matches(pr)
	assert.False(t, m.Match)
	assert.Contains(t, m.Reason, "merge queue")
}

func TestDuplicateApplicationNamesKeepTheFirst(t *testing.T) {
	cfg := config.Load(map[string][]byte{"a.yaml": []byte(good), "b.yaml": []byte(good)})
	require.Len(t, cfg.Applications, 1)
	assert.Equal(t, "a.yaml", cfg.Applications[0].File)
	require.Len(t, cfg.Errors, 1)
	assert.Equal(t, "b.yaml:1: name: application shop is already declared in a.yaml", cfg.Errors[0].Error())
	assert.Equal(t, "shop", cfg.BrokenFiles["b.yaml"])
}

func TestMatches(t *testing.T) {
	cfg := config.Load(map[string][]byte{"a.yaml": []byte(good)})
	require.Empty(t, cfg.Errors)
	app := cfg.Applications[0]
	base := config.PullRequestView{Labels: []string{"preview"}, HeadBranch: "feature/x", BaseBranch: "main"}
	tests := []struct {
		name   string
		change func(*config.PullRequestView)
		match  bool
		reason string
	}{
		{"matches", func(*config.PullRequestView) {}, true, ""},
		{"draft", func(p *config.PullRequestView) { p.Draft = true }, false, "draft pull requests are off"},
		{"missing label", func(p *config.PullRequestView) { p.Labels = nil }, false, `label "preview" is required`},
		{"excluded label", func(p *config.PullRequestView) { p.Labels = append(p.Labels, "no-preview") }, false, `label "no-preview" is excluded`},
		{"head branch", func(p *config.PullRequestView) { p.HeadBranch = "fix/y" }, false, `head branch "fix/y" does not match ^feature/`},
		{"base branch", func(p *config.PullRequestView) { p.BaseBranch = "main2" }, false, `base branch "main2" does not match ^main$`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr := base
			pr.Labels = append([]string(nil), base.Labels...)
			tt.change(&pr)
			got := app.Matches(pr)
			assert.Equal(t, tt.match, got.Match)
			assert.Equal(t, tt.reason, got.Reason)
		})
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"feature/Cart_v2":          "feature-cart-v2",
		"--x--":                    "x",
		"UPPER.case/With Spaces!!": "upper-case-with-spaces",
		strings.Repeat("a", 70):    strings.Repeat("a", 63),
	} {
		assert.Equal(t, want, config.Slug(in), in)
	}
}

// TestRenderKeepsTextLiterally: what an author writes (a title, a branch)
// lands in the values as written: no HTML escaping, no template evaluated
// from the text itself.
func TestRenderKeepsTextLiterally(t *testing.T) {
	for _, title := range []string{
		`"quoted" 'single' & <b>bold</b>`,
		"{{ .Number }} stays text",
		"key: value\n- item\n&anchor *alias",
		"$(rm -rf /); `id` | tee",
		"\xff\xfe not UTF-8",
	} {
		got, err := config.Render("title", "{{ .Title }}", config.Data{Title: title})
		require.NoError(t, err)
		assert.Equal(t, title, got)
	}
}

const sharedWithBindingSecret = `kind: SharedWorkload
name: postgres
spec:
  chart: {repository: /charts/postgres, name: postgres, version: 0.1.0}
  instanceSecret: {keys: [ADMIN_PASSWORD]}
  bindingSecret:
    keys: [PGPASSWORD]
    length: 24
  binding:
    PGUSER: "env_{{ .Hash }}"
`

// A shared workload's keys generated per binding are read from the config
// repository; a key that is also rendered or an instance key is refused at
// its line.
func TestSharedWorkloadBindingSecret(t *testing.T) {
	cfg := config.Load(map[string][]byte{"shared/postgres.yaml": []byte(sharedWithBindingSecret)})
	require.Empty(t, cfg.Errors)
	require.Len(t, cfg.SharedWorkloads, 1)
	g := cfg.SharedWorkloads[0].Spec.BindingSecret
	require.NotNil(t, g)
	assert.Equal(t, []string{"PGPASSWORD"}, g.Keys)
	assert.Equal(t, int32(24), g.Length)

	for _, tt := range []struct{ name, from, to, want string }{
		{"rendered too", "PGUSER:", "PGPASSWORD:", `shared/postgres.yaml:7: spec.bindingSecret.keys[0]: "PGPASSWORD" is also a key of spec.binding`},
		{"instance key too", "[ADMIN_PASSWORD]", "[PGPASSWORD]", `shared/postgres.yaml:7: spec.bindingSecret.keys[0]: "PGPASSWORD" is also a key of spec.instanceSecret.keys`},
		{"length", "length: 24", "length: 8", "shared/postgres.yaml:8: spec.bindingSecret.length: 8 is not between 16 and 256"},
		{"unknown field", "length: 24", "lenght: 24", "shared/postgres.yaml:8: spec.bindingSecret.lenght: unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Load(map[string][]byte{"shared/postgres.yaml": []byte(strings.Replace(sharedWithBindingSecret, tt.from, tt.to, 1))})
			require.Empty(t, cfg.SharedWorkloads)
			var got []string
			for _, e := range cfg.Errors {
				got = append(got, e.Error())
			}
			assert.Contains(t, strings.Join(got, "\n"), tt.want)
		})
	}
}
