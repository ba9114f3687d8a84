package render_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

func app(t *testing.T, extra string) *config.Application {
	t.Helper()
	cfg := config.Load(map[string][]byte{"a.yaml": []byte(`kind: Application
name: shop
repository: acme/shop
trigger:
  labels: [preview]
  excludeLabels: [no-preview]
components:
  - name: api
    chart: {repository: "oci://r.example.com/charts", name: api, version: "~1.4"}
    values: {replicas: 1}
    pullRequestValues:
      image: {tag: "{{ .ShortSHA }}"}
      list: ["{{ .Number }}", 3]
url: "https://{{ .BranchSlug }}.example.com"
` + extra)})
	require.Empty(t, cfg.Errors)
	return cfg.Applications[0]
}

func pr(n int, labels ...string) provider.PullRequest {
	return provider.PullRequest{Repository: "acme/shop", Number: n, State: "open", HeadSHA: "0123456789abcdef0123456789abcdef01234567", HeadBranch: "feature/X", BaseBranch: "main", Labels: labels}
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestEnvironmentName(t *testing.T) {
	long := strings.Repeat("a", 30)
	names := map[string]bool{}
	for _, c := range []struct {
		app, repo string
		n         int
	}{{"shop", "acme/shop", 1}, {"shop", "acme/shop", 2}, {"shop", "acme/other", 1}, {"shop2", "acme/shop", 1}, {long, "acme/shop", 2147483647}} {
		n := render.EnvironmentName(c.app, c.repo, c.n)
		assert.True(t, dnsLabel.MatchString(n), n)
		assert.LessOrEqual(t, len(n), 52, n)
		assert.False(t, names[n], "collision %s", n)
		names[n] = true
	}
	assert.Regexp(t, `^shop-pr-42-[0-9a-f]{6}$`, render.EnvironmentName("shop", "acme/shop", 42))
	assert.Equal(t, render.EnvironmentName("shop", "Acme/Shop", 42), render.EnvironmentName("shop", "acme/shop", 42), "stable across repository spelling")
}

func TestEnvironment(t *testing.T) {
	a := app(t, "ttl: 24h\n")
	e, err := render.Environment(a, pr(7, "preview"), "petri-system", map[string]string{"api": "1.4.2"})
	require.NoError(t, err)
	assert.Equal(t, "petri-system", e.Namespace)
	assert.Equal(t, "1.4.2", e.Spec.Components[0].Chart.Version)
	assert.JSONEq(t, `{"replicas":1}`, string(e.Spec.Components[0].Values.Raw))
	assert.JSONEq(t, `{"image":{"tag":"0123456"},"list":["7",3]}`, string(e.Spec.Values["api"].Raw))
	assert.Equal(t, "https://feature-x.example.com", e.Annotations[render.AnnotationURL])
	assert.Nil(t, e.Spec.TTL, "sync expires its environments itself; spec.ttl is for hand-written ones")
	assert.True(t, render.Owned(e.Labels))

	_, err = render.Environment(a, pr(7), "ns", map[string]string{"api": "~1.4"})
	assert.ErrorContains(t, err, "not resolved", "a range never reaches an object")
	_, err = render.Environment(a, pr(7), "ns", nil)
	assert.Error(t, err)
}

// A component waits for its workloads unless its release says wait: false;
// what the config file leaves unset stays unset in the environment, where
// the operator reads it as true.
func TestEnvironmentReleaseWait(t *testing.T) {
	for release, want := range map[string]*bool{
		"":                             nil,
		"    release: {wait: true}\n":  new(true),
		"    release: {wait: false}\n": new(false),
	} {
		cfg := config.Load(map[string][]byte{"a.yaml": []byte(`kind: Application
name: shop
repository: acme/shop
components:
  - name: api
    chart: {repository: "oci://r.example.com/charts", name: api, version: "1.4.2"}
` + release)})
		require.Empty(t, cfg.Errors)
		e, err := render.Environment(cfg.Applications[0], pr(7), "petri-system", map[string]string{"api": "1.4.2"})
		require.NoError(t, err)
		rel := e.Spec.Components[0].Release
		assert.Equal(t, want, rel.Wait, "%q", release)
		assert.Equal(t, want == nil || *want, rel.Waits(), "%q", release)
	}
}

func TestOwned(t *testing.T) {
	assert.True(t, render.Owned(map[string]string{petriv1.LabelManagedBy: "petri-sync", render.LabelApplication: "a"}))
	assert.False(t, render.Owned(map[string]string{petriv1.LabelManagedBy: "petri-sync"}))
	assert.False(t, render.Owned(map[string]string{petriv1.LabelManagedBy: "petri-operator", render.LabelApplication: "a"}))
	assert.False(t, render.Owned(nil))
}

func TestDecide(t *testing.T) {
	closedPR := func(n int, merged bool) provider.PullRequest {
		p := pr(n)
		p.State, p.Merged = "closed", merged
		return p
	}
	draft := pr(9, "preview")
	draft.Draft = true
	tests := []struct {
		name     string
		cap      int
		open     []provider.PullRequest
		closed   map[int]provider.PullRequest
		existing []render.Existing
		held     map[int]string
		apply    []int
		deletes  map[int]string
		waiting  map[int]string
		unknown  []int
	}{
		{name: "new matching pull requests are applied", open: []provider.PullRequest{pr(2, "preview"), pr(1, "preview"), pr(3)}, apply: []int{1, 2}},
		{name: "existing ones are updated", open: []provider.PullRequest{pr(1, "preview")}, existing: []render.Existing{{Name: "e1", Number: 1}}, apply: []int{1}},
		{name: "closed is evidence", closed: map[int]provider.PullRequest{1: closedPR(1, false)}, existing: []render.Existing{{Name: "e1", Number: 1}}, deletes: map[int]string{1: "pull request closed"}},
		{name: "merged is evidence", closed: map[int]provider.PullRequest{1: closedPR(1, true)}, existing: []render.Existing{{Name: "e1", Number: 1}}, deletes: map[int]string{1: "pull request merged"}},
		{name: "no longer matching is evidence", open: []provider.PullRequest{pr(1, "preview", "no-preview")}, existing: []render.Existing{{Name: "e1", Number: 1}}, deletes: map[int]string{1: `pull request no longer matches: label "no-preview" is excluded`}},
		{name: "a draft is not applied", open: []provider.PullRequest{draft}},
		{name: "absent from an empty listing is not evidence", existing: []render.Existing{{Name: "e1", Number: 1}, {Name: "e2", Number: 2}}, unknown: []int{1, 2}},
		{name: "a closed map entry without state is not evidence", closed: map[int]provider.PullRequest{1: {Number: 1}}, existing: []render.Existing{{Name: "e1", Number: 1}}, unknown: []int{1}},
		{name: "cap: oldest first, newest wait", cap: 2, open: []provider.PullRequest{pr(3, "preview"), pr(1, "preview"), pr(2, "preview")}, apply: []int{1, 2}, waiting: map[int]string{3: "waiting for a free environment: shop has its maximum of 2"}},
		{name: "cap: existing keep their slot", cap: 1, open: []provider.PullRequest{pr(1, "preview"), pr(5, "preview")}, existing: []render.Existing{{Name: "e5", Number: 5}}, apply: []int{5}, waiting: map[int]string{1: "waiting for a free environment: shop has its maximum of 1"}},
		{name: "cap: unknown ones hold their slot", cap: 1, open: []provider.PullRequest{pr(2, "preview")}, existing: []render.Existing{{Name: "e1", Number: 1}}, unknown: []int{1}, waiting: map[int]string{2: "waiting for a free environment: shop has its maximum of 1"}},
		{name: "cap: a deleted one holds its slot until it is gone", cap: 1, open: []provider.PullRequest{pr(2, "preview")}, closed: map[int]provider.PullRequest{1: closedPR(1, false)}, existing: []render.Existing{{Name: "e1", Number: 1}}, deletes: map[int]string{1: "pull request closed"}, waiting: map[int]string{2: "waiting for a free environment: shop has its maximum of 1"}},
		{name: "cap: one being deleted holds its slot", cap: 1, open: []provider.PullRequest{pr(2, "preview")}, existing: []render.Existing{{Name: "e1", Number: 1, Deleting: true}}, waiting: map[int]string{2: "waiting for a free environment: shop has its maximum of 1"}},
		{name: "cap: a gone one frees its slot", cap: 1, open: []provider.PullRequest{pr(2, "preview")}, closed: map[int]provider.PullRequest{1: closedPR(1, false)}, apply: []int{2}},
		{name: "held: an expired one is deleted and not written again", open: []provider.PullRequest{pr(1, "preview"), pr(2, "preview")}, existing: []render.Existing{{Name: "e1", Number: 1}}, held: map[int]string{1: "expired", 2: "expired"}, deletes: map[int]string{1: "expired"}},
		{name: "held: takes no slot", cap: 1, open: []provider.PullRequest{pr(1, "preview"), pr(2, "preview")}, held: map[int]string{1: "expired"}, apply: []int{2}},
		{name: "an environment being deleted is not re-applied", open: []provider.PullRequest{pr(1, "preview")}, existing: []render.Existing{{Name: "e1", Number: 1, Deleting: true}}, waiting: map[int]string{1: "the previous environment of this pull request is still being deleted"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := app(t, "")
			a.MaxEnvironments = tt.cap
			plan := render.Decide(a, tt.open, tt.closed, tt.existing, tt.held)
			var apply []int
			for _, p := range plan.Apply {
				apply = append(apply, p.Number)
			}
			assert.Equal(t, tt.apply, apply)
			deletes := map[int]string{}
			for _, d := range plan.Delete {
				deletes[d.Number] = d.Reason
			}
			if tt.deletes == nil {
				tt.deletes = map[int]string{}
			}
			assert.Equal(t, tt.deletes, deletes)
			if tt.waiting == nil {
				tt.waiting = map[int]string{}
			}
			assert.Equal(t, tt.waiting, plan.Waiting)
			var unknown []int
			for _, u := range plan.Unknown {
				unknown = append(unknown, u.Number)
			}
			assert.Equal(t, tt.unknown, unknown)
			for n, reason := range tt.held {
				if _, open := plan.Held[n]; open {
					assert.Equal(t, reason, plan.Held[n])
				}
			}
			for _, p := range plan.Apply {
				assert.NotContains(t, tt.held, p.Number, "a held pull request is never applied")
			}
		})
	}
}

func env(gen, observed int64, phase petriv1.EnvironmentPhase, ready metav1.ConditionStatus, comps ...petriv1.ComponentStatus) *petriv1.EphemeralEnvironment {
	e := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "shop-pr-1-abcdef", Generation: gen}}
	e.Spec.Source = &petriv1.Source{SHA: "0123456789"}
	e.Spec.Components = []petriv1.Component{{Name: "api", Chart: petriv1.ChartReference{Name: "api", Version: "1.4.2"}}, {Name: "web", Chart: petriv1.ChartReference{Name: "web", Version: "2.0.1"}}}
	e.Status.ObservedGeneration, e.Status.Phase, e.Status.Components = observed, phase, comps
	if ready != "" {
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: ready, Reason: "x", Message: "ready says why", ObservedGeneration: observed})
	}
	return e
}

func TestCommitStatus(t *testing.T) {
	tests := []struct {
		name  string
		state render.PRState
		want  string
		desc  string
		post  bool
	}{
		{"nothing to say", render.PRState{HeadSHA: "0123456789"}, "", "", false},
		{"waiting", render.PRState{HeadSHA: "0123456789", Waiting: "waiting for check run build on 0123456"}, "pending", "waiting for check run build on 0123456", true},
		{"error", render.PRState{HeadSHA: "0123456789", Error: "chart resolution failed"}, "error", "chart resolution failed", true},
		{"new spec not observed yet", render.PRState{HeadSHA: "0123456789", Env: env(2, 1, petriv1.EnvironmentReady, metav1.ConditionTrue)}, "pending", "Deploying: 0 of 2 components deployed", true},
		{"ready", render.PRState{HeadSHA: "0123456789", URL: "https://x", Env: env(2, 2, petriv1.EnvironmentReady, metav1.ConditionTrue)}, "success", "Environment ready at https://x", true},
		{"failed with component error", render.PRState{HeadSHA: "0123456789", Env: env(2, 2, petriv1.EnvironmentFailed, metav1.ConditionFalse, petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, LastError: "boom"})}, "failure", "Deploy failed: web: boom", true},
		{"older commit deployed", render.PRState{HeadSHA: "fedcba9876", Env: env(2, 2, petriv1.EnvironmentReady, metav1.ConditionTrue)}, "pending", "waiting to deploy fedcba9", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.state.Application = "shop"
			st, ok := render.CommitStatus(tt.state)
			assert.Equal(t, tt.post, ok)
			if ok {
				assert.Equal(t, "petri/shop", st.Context)
				assert.Equal(t, tt.want, st.State)
				assert.Equal(t, tt.desc, st.Description)
			}
		})
	}
}

func TestComment(t *testing.T) {
	e := env(1, 1, petriv1.EnvironmentDeploying, "", petriv1.ComponentStatus{Name: "api", Phase: petriv1.ComponentDeployed, Generation: 1}, petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, LastError: "a|b\nc"})
	e.Status.TargetNamespace = "shop-pr-1-x"
	body := render.Comment([]render.PRState{
		{Application: "shop", Env: e, URL: "https://x"},
		{Application: "admin", Waiting: "waiting for a free environment"},
		{Application: "blog", Deleted: "pull request closed"},
	}, render.State{})
	assert.True(t, strings.HasPrefix(body, render.CommentMarker))
	assert.Less(t, strings.Index(body, "#### admin"), strings.Index(body, "#### shop"), "sections sorted")
	assert.Contains(t, body, "- URL: https://x")
	assert.Contains(t, body, "- Namespace: `shop-pr-1-x`")
	assert.Contains(t, body, "- Cluster: management cluster\n", "bound without a workload cluster")
	assert.Contains(t, body, "| api | api 1.4.2 | Deployed |  |")
	assert.Contains(t, body, "| web | web 2.0.1 | Failed | `a\\|b c` |", "table cells escaped")
	assert.Contains(t, body, ":hourglass: waiting for a free environment")
	assert.Contains(t, body, "Environment deleted: pull request closed.")
}

// What the deploy found of the release's pods is what the pull request
// reads: the comment and the commit status name the pod, the container and
// the cause, as the environment's status does.
func TestFeedbackNamesThePodsThatDoNotRun(t *testing.T) {
	crash := `ContainerCrashed: install web: pod web-7d9c-x2x4z container app crashed (restarted 3 times, exit code 1, Error); last log line: "cannot reach the database at db:5432"`
	e := env(1, 1, petriv1.EnvironmentFailed, metav1.ConditionFalse,
		petriv1.ComponentStatus{Name: "api", Phase: petriv1.ComponentDeployed, Generation: 1},
		petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: 1, Attempt: 1, LastError: crash})
	meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: petriv1.ReasonDeployFailed,
		Message: "failed: web (" + crash + ")", ObservedGeneration: 1})
	body := render.Comment([]render.PRState{{Application: "shop", Env: e}}, render.State{})
	assert.Contains(t, body, ":x: **Failed**: `failed: web ("+crash+")`")
	assert.Contains(t, body, "| web | web 2.0.1 | Failed | `"+crash+"` |")
	st, ok := render.CommitStatus(render.PRState{Application: "shop", HeadSHA: "0123456789", Env: e})
	require.True(t, ok)
	assert.Equal(t, "failure", st.State)
	assert.Contains(t, st.Description, "pod web-7d9c-x2x4z container app crashed")

	// Deployed without waiting: Ready, and it says so.
	e = env(1, 1, petriv1.EnvironmentReady, metav1.ConditionTrue)
	e.Spec.Components[1].Release.Wait = new(false)
	body = render.Comment([]render.PRState{{Application: "shop", Env: e}}, render.State{})
	assert.Contains(t, body, ":white_check_mark: **Ready**: environment ready; not waited for (release.wait is false): web")
}
