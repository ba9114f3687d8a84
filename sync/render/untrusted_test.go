package render_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// A container's last log line is the pull request's code's: quoted in
// Petri's comment, it must not read as Petri's (a link, a team mention, an
// image, HTML) nor carry terminal escapes or bidirectional overrides.
func TestCommentQuotesWhatTheApplicationWrote(t *testing.T) {
	hostile := "ContainerCrashed: last log line: \x1b]52;c;ZWNobw==\x07 `x` [Approve deploy](https://evil.example) @org/security <img src=x> \u202eexe.txt"
	e := env(1, 1, petriv1.EnvironmentFailed, metav1.ConditionFalse,
		petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: 1, LastError: hostile, Job: "shop-pr-1-web-deploy"})
	body := render.Comment([]render.PRState{{Application: "shop", Env: e}}, render.State{})

	row := ""
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "| web |") {
			row = l
		}
	}
	require.NotEmpty(t, row, body)
	want := "`ContainerCrashed: last log line: ]52;c;ZWNobw== 'x' [Approve deploy](https://evil.example) @org/security <img src=x> exe.txt`"
	assert.Contains(t, row, "| "+want+" (Job `shop-pr-1-web-deploy`", "the application's text is one code span, its backticks unable to close it")
	assert.Contains(t, body, ":x: **Failed**: `web: ContainerCrashed", "the failure's detail is quoted too")
	for _, r := range body {
		assert.False(t, r == 0x1b || r == 0x07 || r == '\u202e', "control or override %U in the comment", r)
	}
	assert.NotContains(t, body, "\u202e")
}

// Text a pull request's author chose reaches Helm values verbatim but for
// template delimiters: a chart that runs tpl over a value fed from the
// title must find no action to evaluate there.
func TestPullRequestTextIsInertForTemplates(t *testing.T) {
	cfg := config.Load(map[string][]byte{"a.yaml": []byte(`kind: Application
name: shop
repository: acme/shop
components:
  - name: api
    chart: {repository: "oci://r.example.com/charts", name: api, version: "1.4.2"}
    pullRequestValues:
      title: "{{ .Title }}"
      branch: "{{ .Branch }}"
      author: "{{ .Author }}"
      labels: "{{ join \",\" .Labels }}"
`)})
	require.Empty(t, cfg.Errors)
	p := pr(7, `{{ fail "x" }}`)
	p.Title = `fix {{ fail (lookup "v1" "Secret" "ns" "petri-binding-postgres").data.password }} {{{x}}}`
	p.HeadBranch = "feature/{{.}}"
	p.Author = "{{ . }}"
	e, err := render.Environment(cfg.Applications[0], p, "petri-system", map[string]string{"api": "1.4.2"})
	require.NoError(t, err)
	values := string(e.Spec.Values["api"].Raw)
	assert.NotContains(t, values, "{{")
	assert.NotContains(t, values, "}}")
	assert.Contains(t, values, `fix { { fail (lookup \"v1\" \"Secret\" \"ns\" \"petri-binding-postgres\").data.password } } { { {x} } }`, "the title is otherwise kept")
	assert.Contains(t, values, `"branch":"feature/{ {.} }"`)
	assert.Contains(t, values, `"labels":"{ { fail \"x\" } }"`)
}
