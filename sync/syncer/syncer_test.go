package syncer_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
)

func nilLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func shopFiles(extra string) map[string]string {
	return map[string]string{"applications/shop.yaml": appYAML(extra)}
}

func TestPullRequestLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})

	pr := h.open(githubapi.PullRequest{Title: "Add cart", Author: "alice", HeadRef: "feature/Cart_v2", Labels: []string{"preview", "ui"}})
	e := h.waitEnv(envName(pr.Number), nil)

	assert.Equal(t, map[string]string{
		petriv1.LabelManagedBy:  "petri-sync",
		render.LabelApplication: "shop",
		render.LabelPullRequest: fmt.Sprint(pr.Number),
	}, e.Labels)
	require.Len(t, e.Spec.Components, 2)
	assert.Equal(t, "0.9.1", e.Spec.Components[0].Chart.Version, "^0.9 resolved against the OCI registry's tags")
	assert.Equal(t, "1.4.2", e.Spec.Components[1].Chart.Version, "~1.4 resolved against index.yaml, pre-releases excluded")
	assert.JSONEq(t, `{"replicas":1}`, string(e.Spec.Components[0].Values.Raw))
	assert.Equal(t, []string{"api"}, e.Spec.Components[1].DependsOn)
	assert.Equal(t, map[string]any{"image": map[string]any{"tag": pr.HeadSHA[:7]}, "pr": fmt.Sprint(pr.Number), "branch": "feature-cart-v2"}, values(t, e, "api"))
	assert.Equal(t, map[string]any{"host": fmt.Sprintf("pr-%d.shop.test", pr.Number), "title": "Add cart", "author": "alice", "labels": "preview,ui", "sha": pr.HeadSHA}, values(t, e, "web"))
	assert.Equal(t, &petriv1.Source{Repository: ghRepo, Branch: "feature/Cart_v2", SHA: pr.HeadSHA, PullRequest: pr.Number, URL: fmt.Sprintf("https://github.com/%s/pull/%d", ghRepo, pr.Number)}, e.Spec.Source)
	assert.Nil(t, e.Spec.TTL, "sync expires its environments itself (docs/lifecycle.md)")
	assert.Equal(t, fmt.Sprintf("https://pr-%d.shop.test", pr.Number), e.Annotations[render.AnnotationURL])
	assert.Contains(t, e.ManagedFields[0].Manager, "petri-sync")

	// A push to the pull request re-renders the spec in place.
	gen := e.Generation
	newSHA := githubapi.SHA("second push")
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.HeadSHA = newSHA })
	h.prEvent(pr.Number, "synchronize")
	e = h.waitEnv(envName(pr.Number), func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Source.SHA == newSHA })
	assert.Greater(t, e.Generation, gen)
	assert.Equal(t, newSHA[:7], values(t, e, "api")["image"].(map[string]any)["tag"])

	// The excluded label deletes it.
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.Labels = append(p.Labels, "no-preview") })
	h.prEvent(pr.Number, "labeled")
	h.waitGone(envName(pr.Number))

	// Closing deletes; merging deletes.
	closed := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	merged := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(closed.Number), nil)
	h.waitEnv(envName(merged.Number), nil)
	h.gh.UpdatePullRequest(ghRepo, closed.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(closed.Number, "closed")
	h.gh.UpdatePullRequest(ghRepo, merged.Number, func(p *githubapi.PullRequest) { p.State, p.Merged = "closed", true })
	h.prEvent(merged.Number, "closed")
	h.waitGone(envName(closed.Number))
	h.waitGone(envName(merged.Number))

	// A draft is ignored while drafts are off; ready for review creates it.
	draft := h.open(githubapi.PullRequest{Labels: []string{"preview"}, Draft: true})
	h.resync()
	_, err := h.get(envName(draft.Number))
	assert.True(t, err != nil, "draft pull request got an environment")
	h.gh.UpdatePullRequest(ghRepo, draft.Number, func(p *githubapi.PullRequest) { p.Draft = false })
	h.prEvent(draft.Number, "ready_for_review")
	h.waitEnv(envName(draft.Number), nil)

	// A pull request without the required label or to another base gets nothing.
	nolabel := h.open(githubapi.PullRequest{})
	otherBase := h.open(githubapi.PullRequest{Labels: []string{"preview"}, BaseRef: "release-1"})
	h.resync()
	for _, n := range []int{nolabel.Number, otherBase.Number} {
		_, err := h.get(envName(n))
		assert.Error(t, err, "pull request %d should not match", n)
	}
	assert.Equal(t, 1, h.envCount())
}

func TestWebhookSignatureAndPayloads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := h.gh.PullRequestEvent(ghRepo, pr.Number, "opened")
	require.NoError(t, err)
	h.gh.ResetRequests()
	before := h.reconciles()

	send := func(d githubapi.Delivery, key []byte, mutate func(*http.Request)) int {
		req, err := http.NewRequest(http.MethodPost, h.url+api.WebhookPath, strings.NewReader(string(d.Body)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", d.Event)
		if key != nil {
			req.Header.Set("X-Hub-Signature-256", githubapi.Sign(key, d.Body))
		}
		if mutate != nil {
			mutate(req)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, send(d, nil, nil), "missing signature")
	assert.Equal(t, http.StatusUnauthorized, send(d, []byte("wrong"), nil), "wrong key")
	assert.Equal(t, http.StatusUnauthorized, send(d, []byte(secret), func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", "sha1=abc") }), "wrong scheme")
	tampered := githubapi.Delivery{Event: d.Event, Body: []byte(strings.Replace(string(d.Body), `"draft":false`, `"draft":true`, 1))}
	assert.Equal(t, http.StatusUnauthorized, send(tampered, nil, func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", githubapi.Sign([]byte(secret), d.Body)) }), "body changed after signing")

	malformed := githubapi.Delivery{Event: "pull_request", Body: []byte(`{"action": "opened", "pull_request": `)}
	assert.Equal(t, http.StatusBadRequest, send(malformed, []byte(secret), nil))
	noNumber := githubapi.Delivery{Event: "pull_request", Body: []byte(`{"action":"opened","repository":{"full_name":"acme/shop"}}`)}
	assert.Equal(t, http.StatusBadRequest, send(noNumber, []byte(secret), nil))

	for _, ev := range [][2]string{{"ping", ""}, {"pull_request", "assigned"}} {
		d, err := githubapi.Event(ev[0], ev[1])
		require.NoError(t, err)
		if ev[0] == "ping" {
			assert.Equal(t, http.StatusOK, send(d, []byte(secret), nil))
		}
	}
	unknown := githubapi.Delivery{Event: "issues", Body: []byte(`{"action":"opened","issue":{"number":1},"repository":{"full_name":"acme/shop"}}`)}
	code := send(unknown, []byte(secret), nil)
	assert.True(t, code >= 200 && code < 300, "unknown event answered %d", code)

	// Nothing above reached GitHub, reconciled, or wrote an environment.
	assert.Empty(t, h.gh.Requests())
	assert.Equal(t, before, h.reconciles())
	assert.Equal(t, 0, h.envCount())

	// The same delivery, correctly signed, does.
	assert.Equal(t, http.StatusAccepted, send(d, []byte(secret), nil))
	h.waitEnv(envName(pr.Number), nil)
}

func TestWebhookQueueFullAnswers503(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles(""), eventQueue: 2, noSyncerEvents: true})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := h.gh.PullRequestEvent(ghRepo, pr.Number, "opened")
	require.NoError(t, err)
	assert.Equal(t, http.StatusAccepted, h.send(d))
	assert.Equal(t, http.StatusAccepted, h.send(d))
	assert.Equal(t, http.StatusServiceUnavailable, h.send(d), "a full queue refuses so that GitHub redelivers")
	<-h.events
	assert.Equal(t, http.StatusAccepted, h.send(d))
}

func TestNoDeletionWhileGitHubFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles(""), githubTimeout: 300 * time.Millisecond})
	a := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	b := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(a.Number), nil)
	h.waitEnv(envName(b.Number), nil)

	// Pull request a is closed while GitHub misbehaves; its closed webhook
	// is lost.
	h.gh.UpdatePullRequest(ghRepo, a.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	faults := []*githubapi.Fault{
		{Status: http.StatusInternalServerError},
		{Status: http.StatusBadGateway},
		{Delay: 2 * time.Second},                                  // longer than the client's timeout
		{EmptyList: true, Status: http.StatusInternalServerError}, // an empty listing, and single reads fail
	}
	for round := range 12 {
		h.gh.SetFault(faults[round%len(faults)])
		h.resync()
		assert.Equal(t, 2, h.envCount(), "round %d deleted an environment", round)
	}
	// Rate limited: refused until the announced reset, without further calls.
	h.gh.SetFault(&githubapi.Fault{RateLimited: true, RetryAfter: 4 * time.Second})
	h.resync()
	h.gh.ResetRequests()
	h.gh.SetFault(nil)
	h.resync()
	assert.Empty(t, h.gh.Requests(), "no call to GitHub before the rate limit resets")
	assert.Equal(t, 2, h.envCount())

	// An empty listing alone (single reads work) is contradicted by reading
	// the pull requests one by one: b stays, a is positively closed.
	h.gh.SetFault(&githubapi.Fault{EmptyList: true, Match: func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/pulls") }})
	require.Eventually(t, func() bool {
		h.resync()
		_, err := h.get(envName(a.Number))
		return err != nil
	}, 20*time.Second, 100*time.Millisecond)
	h.waitGone(envName(a.Number))
	h.waitEnv(envName(b.Number), nil)

	// Recovery: everything normal again; a pull request closed meanwhile
	// goes at a resync, also when the listing never showed it after its
	// opened webhook (TestLostCloseOfAnUnlistedPullRequest).
	h.gh.SetFault(nil)
	h.gh.UpdatePullRequest(ghRepo, b.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	require.Eventually(t, func() bool {
		h.resync()
		_, err := h.get(envName(b.Number))
		return apierrors.IsNotFound(err)
	}, 20*time.Second, 100*time.Millisecond, "the closed pull request's environment goes after the recovery")
}

func TestResyncOfUnchangedRepositoryIsConditional(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	for range 3 {
		h.deployed()
	}
	h.resync() // settle: feedback and listings cached
	require.Eventually(t, func() bool {
		before := len(h.gh.Requests())
		h.resync()
		return len(h.gh.Requests()) == before+2
	}, 10*time.Second, 50*time.Millisecond)

	h.gh.ResetRequests()
	remaining := h.gh.RateLimitRemaining()
	const rounds = 5
	for range rounds {
		h.resync()
	}
	reqs := h.gh.Requests()
	require.Len(t, reqs, 2*rounds, "two requests per resync of one repository: its open pull requests and its recent comments")
	for _, r := range reqs {
		assert.Equal(t, http.MethodGet, r.Method)
		assert.True(t, r.Conditional, "%s %s was not conditional", r.Method, r.Path)
		assert.Equal(t, http.StatusNotModified, r.Status)
	}
	assert.Equal(t, remaining, h.gh.RateLimitRemaining(), "304 answers cost no rate limit")
	t.Logf("GitHub requests per resync of an unchanged repository with 3 open pull requests: %d (all 304)", len(reqs)/rounds)
}

func TestPeriodicResyncRepairsLostWebhooks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles(""), resync: 150 * time.Millisecond})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}}) // no webhook
	h.waitEnv(envName(pr.Number), nil)
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" }) // no webhook
	h.waitGone(envName(pr.Number))
}

func TestObjectsWithoutSyncLabelsAreNeverTouched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	spec := petriv1.EphemeralEnvironmentSpec{Components: []petriv1.Component{{Name: "x", Chart: petriv1.ChartReference{Repository: "/charts/x", Name: "x", Version: "1.0.0"}}},
		Source: &petriv1.Source{Repository: ghRepo, PullRequest: pr.Number}}
	// Someone else's object under the name sync would use, and one that
	// looks like sync's (same application label, repository annotation) but
	// lacks the managed-by label.
	squatter := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: envName(pr.Number), Namespace: h.ns}, Spec: spec}
	lookalike := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "manual-shop", Namespace: h.ns,
		Labels:      map[string]string{render.LabelApplication: "shop", render.LabelPullRequest: fmt.Sprint(pr.Number)},
		Annotations: map[string]string{render.AnnotationRepository: ghRepo}}, Spec: spec}
	require.NoError(t, h.c.Create(h.ctx, squatter))
	require.NoError(t, h.c.Create(h.ctx, lookalike))
	h.prEvent(pr.Number, "opened")
	h.resync()
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	h.prEvent(pr.Number, "closed")
	h.resync()
	for _, o := range []*petriv1.EphemeralEnvironment{squatter, lookalike} {
		got, err := h.get(o.Name)
		require.NoError(t, err, "%s was deleted", o.Name)
		assert.Equal(t, o.ResourceVersion, got.ResourceVersion, "%s was modified", o.Name)
	}
}

func TestConfigRepositoryChangesAndErrors(t *testing.T) {
	t.Parallel()
	other := strings.ReplaceAll(strings.ReplaceAll(appYAML(""), "name: shop\n", "name: blog\n"), "repository: acme/shop", "repository: acme/blog")
	h := newHarness(t, harnessOptions{files: map[string]string{"applications/shop.yaml": appYAML(""), "applications/blog.yaml": other}})
	shopPR := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	blogPR := h.gh.OpenPullRequest("acme/blog", githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := h.gh.PullRequestEvent("acme/blog", blogPR.Number, "opened")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	blogEnv := render.EnvironmentName("blog", "acme/blog", blogPR.Number)
	h.waitEnv(envName(shopPR.Number), nil)
	h.waitEnv(blogEnv, nil)

	// A change to the config repository updates every affected environment.
	h.pushConfig(map[string]string{"applications/shop.yaml": strings.Replace(appYAML(""), "replicas: 1", "replicas: 3", 1)})
	h.waitEnv(envName(shopPR.Number), func(e *petriv1.EphemeralEnvironment) bool {
		return string(e.Spec.Components[0].Values.Raw) == `{"replicas":3}`
	})

	// blog.yaml breaks: a misspelt field on line 6.
	broken := strings.Replace(other, "trigger:\n  labels:", "trigger:\n  lables:", 1)
	h.pushConfig(map[string]string{"applications/blog.yaml": broken})
	_, apps := h.s.Applications()
	var blogApp *syncer.Application
	for i := range apps {
		if apps[i].File == "applications/blog.yaml" {
			blogApp = &apps[i]
		}
	}
	require.NotNil(t, blogApp)
	assert.Equal(t, "ConfigError", blogApp.State)
	assert.Equal(t, "blog", blogApp.Name)
	require.Len(t, blogApp.Errors, 1)
	assert.Equal(t, "applications/blog.yaml:6: trigger.lables: unknown field", blogApp.Errors[0])

	// The broken application's environment stays as it was, even when its
	// pull request closes; the other application keeps working.
	blogBefore, err := h.get(blogEnv)
	require.NoError(t, err)
	h.gh.UpdatePullRequest("acme/blog", blogPR.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	d, err = h.gh.PullRequestEvent("acme/blog", blogPR.Number, "closed")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, h.send(d))
	second := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(second.Number), nil)
	h.resync()
	blogAfter, err := h.get(blogEnv)
	require.NoError(t, err, "a broken config file deleted its application's environment")
	assert.Equal(t, blogBefore.ResourceVersion, blogAfter.ResourceVersion)

	var listed struct {
		Revision string               `json:"revision"`
		Items    []syncer.Application `json:"items"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, h.url+api.ApplicationsPath, &listed))
	assert.True(t, slices.ContainsFunc(listed.Items, func(a syncer.Application) bool {
		return a.State == "ConfigError" && slices.Contains(a.Errors, "applications/blog.yaml:6: trigger.lables: unknown field")
	}), "the read API reports the broken file: %+v", listed.Items)

	// Fixed: the closed pull request's environment is cleaned up.
	h.pushConfig(map[string]string{"applications/blog.yaml": other})
	h.resync()
	h.waitGone(blogEnv)
}

func TestSharedWorkloadsFromConfig(t *testing.T) {
	t.Parallel()
	sw := fmt.Sprintf(`kind: SharedWorkload
name: postgres
spec:
  chart:
    repository: %s
    name: web
    version: "~1.4"
  values:
    auth: {existingSecretKey: admin-password}
  instanceSecret:
    keys: [admin-password]
  binding:
    host: "postgres.{{ .SharedNamespace }}.svc"
  provision:
    image: example.com/pg-provision:1.0.0
    args: [create]
`, chartRepo.URL)
	h := newHarness(t, harnessOptions{files: map[string]string{"shared/postgres.yaml": sw, "applications/shop.yaml": appYAML("sharedWorkloads: [postgres]\n")}})
	var got petriv1.SharedWorkload
	require.Eventually(t, func() bool {
		return h.c.Get(h.ctx, client_key(h.ns, "postgres"), &got) == nil
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "1.4.2", got.Spec.Chart.Version)
	assert.Equal(t, "petri-sync", got.Labels[petriv1.LabelManagedBy])
	assert.Equal(t, []string{"admin-password"}, got.Spec.InstanceSecret.Keys)
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	e := h.waitEnv(envName(pr.Number), nil)
	assert.Equal(t, []string{"postgres"}, e.Spec.SharedWorkloads)

	// Removed from a config revision without errors: deleted.
	h.pushConfig(map[string]string{"shared/postgres.yaml": "", "applications/shop.yaml": appYAML("")})
	require.Eventually(t, func() bool {
		return h.c.Get(h.ctx, client_key(h.ns, "postgres"), &got) != nil
	}, 10*time.Second, 10*time.Millisecond)
}

func TestUnresolvableChartVersionIsReportedAndChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	before := h.waitEnv(envName(pr.Number), nil)

	h.pushConfig(map[string]string{"applications/shop.yaml": strings.Replace(appYAML(""), `version: "~1.4"`, `version: "~9.1"`, 1)})
	h.prEvent(pr.Number, "synchronize")
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
		return len(sts) > 0 && sts[len(sts)-1].State == "error"
	}, 10*time.Second, 10*time.Millisecond)
	sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
	assert.Contains(t, sts[len(sts)-1].Description, "applications/shop.yaml:27: components[1].chart.version: no version of chart web")
	after, err := h.get(envName(pr.Number))
	require.NoError(t, err)
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "nothing is written with an unresolved version")
}
