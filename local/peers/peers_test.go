package peers

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

var testSetup = Setup{
	Repository: "petri-dev/hello", Label: "preview",
	ChartRepository: "http://127.0.0.1:1/charts", Chart: "example-app", ChartVersion: "0.1.0",
	APIURL: "http://127.0.0.1:2", SyncAPIURL: "http://127.0.0.1:3/api/v3/", RequeueAfterSeconds: 1800, Cluster: "https://127.0.0.1:4",
}

func TestApplicationSetYAML(t *testing.T) {
	var appset map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(ApplicationSetYAML(testSetup)), &appset))
	spec := appset["spec"].(map[string]any)
	gen := spec["generators"].([]any)[0].(map[string]any)["pullRequest"].(map[string]any)
	gh := gen["github"].(map[string]any)
	assert.Equal(t, "petri-dev", gh["owner"])
	assert.Equal(t, "hello", gh["repo"])
	assert.Equal(t, "http://127.0.0.1:2", gh["api"])
	assert.Equal(t, []any{"preview"}, gh["labels"])
	assert.Equal(t, map[string]any{"secretName": TokenSecret, "key": "token"}, gh["tokenRef"])
	assert.EqualValues(t, 1800, gen["requeueAfterSeconds"])

	tmpl := spec["template"].(map[string]any)
	assert.Equal(t, "hello-pr-{{ .number }}", tmpl["metadata"].(map[string]any)["name"])
	ts := tmpl["spec"].(map[string]any)
	src := ts["source"].(map[string]any)
	assert.Equal(t, testSetup.ChartRepository, src["repoURL"])
	assert.Equal(t, "example-app", src["chart"])
	assert.Equal(t, "0.1.0", src["targetRevision"])
	values := src["helm"].(map[string]any)["valuesObject"].(map[string]any)
	assert.Equal(t, "{{ .head_sha }}", values["commit"])
	assert.Equal(t, map[string]any{"server": "https://127.0.0.1:4", "namespace": "argocd-hello-pr-{{ .number }}"}, ts["destination"])
	sp := ts["syncPolicy"].(map[string]any)
	assert.Equal(t, map[string]any{"prune": true, "selfHeal": true}, sp["automated"])
	assert.Equal(t, []any{"CreateNamespace=true"}, sp["syncOptions"])
}

func TestBothSystemsDeployTheSameChartWithTheSameValues(t *testing.T) {
	var app map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(PetriApplicationYAML(testSetup)), &app))
	assert.Equal(t, testSetup.Repository, app["repository"])
	assert.Equal(t, map[string]any{"labels": []any{"preview"}}, app["trigger"])
	comp := app["components"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"repository": testSetup.ChartRepository, "name": "example-app", "version": "0.1.0"}, comp["chart"])
	petriValues := comp["pullRequestValues"].(map[string]any)

	var appset map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(ApplicationSetYAML(testSetup)), &appset))
	argoValues := appset["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["source"].(map[string]any)["helm"].(map[string]any)["valuesObject"].(map[string]any)
	// The same values, each system's template syntax for the same fields.
	petriFixed := comp["values"].(map[string]any)
	assert.ElementsMatch(t, append(sortedKeys(petriValues), sortedKeys(petriFixed)...), sortedKeys(argoValues))
	assert.Equal(t, petriFixed["resources"], argoValues["resources"])
	assert.Equal(t, "{{ .SHA }}", petriValues["commit"])
	assert.Equal(t, strings.ReplaceAll(petriValues["message"].(string), "{{ .Number }}", "{{ .number }}"), argoValues["message"])
}

func TestArgoCDSettingsKeepSecretsOutOfDocuments(t *testing.T) {
	doc := ArgoCDSettingsYAML("<webhook secret>", "<token>", "<server key>")
	for _, part := range strings.Split(doc, "\n---\n") {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(part), &obj))
		assert.Equal(t, ArgoCDNamespace, obj["metadata"].(map[string]any)["namespace"])
	}
	assert.Contains(t, doc, `webhook.github.secret: "<webhook secret>"`)
	assert.Contains(t, doc, `token: "<token>"`)
	assert.Contains(t, doc, "name: argocd-cm\n")
	assert.Contains(t, doc, "name: argocd-cmd-params-cm\n")
}

func TestInstallRBACPicksTheComponentsIdentities(t *testing.T) {
	install := `apiVersion: v1
kind: ServiceAccount
metadata:
  name: argocd-application-controller
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: argocd-dex-server
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: argocd-applicationset-controller
rules: []
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: argocd-repo-server
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: argocd-repo-server
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: argocd-repo-server}
`
	out, err := InstallRBAC([]byte(install))
	require.NoError(t, err)
	var kinds []string
	for _, part := range strings.Split(strings.TrimPrefix(string(out), "---\n"), "---\n") {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(part), &obj))
		meta := obj["metadata"].(map[string]any)
		kinds = append(kinds, obj["kind"].(string)+"/"+meta["name"].(string))
		if obj["kind"] == "ClusterRole" {
			assert.NotContains(t, meta, "namespace")
		} else {
			assert.Equal(t, ArgoCDNamespace, meta["namespace"])
		}
	}
	assert.Equal(t, []string{"ServiceAccount/argocd-application-controller", "ClusterRole/argocd-applicationset-controller", "RoleBinding/argocd-repo-server"}, kinds)

	_, err = InstallRBAC([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n"))
	assert.Error(t, err)
}

func TestFlowSchemasTellTheSystemsApart(t *testing.T) {
	parts := strings.Split(FlowSchemasYAML("petri-system"), "---\n")
	require.Len(t, parts, 2)
	for i, want := range []struct{ name, group string }{{FlowSchemaPetriDeployers, "system:serviceaccounts:petri-system"}, {FlowSchemaArgoCD, "system:serviceaccounts:argocd"}} {
		var fs map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(parts[i]), &fs))
		assert.Equal(t, want.name, fs["metadata"].(map[string]any)["name"])
		spec := fs["spec"].(map[string]any)
		// Before the suggested service-accounts FlowSchema, at its level.
		assert.Less(t, spec["matchingPrecedence"].(float64), 9000.0)
		assert.Equal(t, "workload-low", spec["priorityLevelConfiguration"].(map[string]any)["name"])
		subj := spec["rules"].([]any)[0].(map[string]any)["subjects"].([]any)[0].(map[string]any)
		assert.Equal(t, want.group, subj["group"].(map[string]any)["name"])
	}
}

func TestRequestsOfFlowSchemas(t *testing.T) {
	before := map[string]float64{
		`apiserver_flowcontrol_dispatched_requests_total{flow_schema="petri-controllers",priority_level="workload-high"}`: 10,
		`apiserver_flowcontrol_dispatched_requests_total{flow_schema="peers-argocd",priority_level="workload-low"}`:       5,
	}
	after := map[string]float64{
		`apiserver_flowcontrol_dispatched_requests_total{flow_schema="petri-controllers",priority_level="workload-high"}`:       30,
		`apiserver_flowcontrol_dispatched_requests_total{flow_schema="petri-leader-election",priority_level="leader-election"}`: 4,
		`apiserver_flowcontrol_dispatched_requests_total{flow_schema="peers-petri-deployers",priority_level="workload-low"}`:    6,
		`apiserver_flowcontrol_dispatched_requests_total{flow_schema="peers-argocd",priority_level="workload-low"}`:             50,
		`apiserver_flowcontrol_dispatched_requests_total{flow_schema="system-nodes",priority_level="system"}`:                   999,
		`apiserver_request_total{flow_schema="peers-argocd"}`:                                                                   1000,
	}
	assert.Equal(t, 30.0, requestsOf(before, after, PetriFlowSchemas))
	assert.Equal(t, 45.0, requestsOf(before, after, ArgoCDFlowSchemas))
}

func TestArgoCDHealthy(t *testing.T) {
	app := func(sync, health, phase, commit string, deleting bool) map[string]any {
		meta := map[string]any{"name": "hello-pr-1"}
		if deleting {
			meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		}
		return map[string]any{"metadata": meta, "status": map[string]any{
			"sync":           map[string]any{"status": sync, "comparedTo": map[string]any{"source": map[string]any{"helm": map[string]any{"valuesObject": map[string]any{"commit": commit}}}}},
			"health":         map[string]any{"status": health},
			"operationState": map[string]any{"phase": phase},
		}}
	}
	assert.Equal(t, "abc", ArgoCDHealthy(app("Synced", "Healthy", "Succeeded", "abc", false)))
	assert.Equal(t, "", ArgoCDHealthy(app("OutOfSync", "Healthy", "Succeeded", "abc", false)))
	assert.Equal(t, "", ArgoCDHealthy(app("Synced", "Progressing", "Succeeded", "abc", false)))
	assert.Equal(t, "", ArgoCDHealthy(app("Synced", "Healthy", "Running", "abc", false)))
	assert.Equal(t, "", ArgoCDHealthy(app("Synced", "Healthy", "Succeeded", "abc", true)))
	assert.Equal(t, "", ArgoCDHealthy(map[string]any{}))

	n, ok := prNumber("hello-pr-42")
	assert.True(t, ok)
	assert.Equal(t, 42, n)
	_, ok = prNumber("other-pr-42")
	assert.False(t, ok)
}

func TestTrackerMeasuresFromTheWebhook(t *testing.T) {
	tr := newTracker()
	start := time.Now()
	tr.expect(1, "sha1", false, start)
	tr.expect(2, "", true, start)
	tr.observe(1, observation{present: true, healthy: "old"})
	tr.observe(2, observation{present: true})
	_, _, missing, err := tr.wait(t.Context(), []int{1, 2}, time.Millisecond)
	require.Error(t, err)
	assert.Equal(t, 2, missing)
	assert.Contains(t, tr.describe([]int{1, 2}), "#1 present=true healthy at old")

	tr.observe(1, observation{present: true, healthy: "sha1"})
	tr.observe(2, observation{})
	took, last, missing, err := tr.wait(t.Context(), []int{1, 2}, time.Minute)
	require.NoError(t, err)
	assert.Zero(t, missing)
	require.Len(t, took, 2)
	assert.False(t, last.Before(start))

	// A phase already reached when it starts counts from its webhook.
	tr.expect(1, "sha1", false, time.Now())
	took, _, _, err = tr.wait(t.Context(), []int{1}, time.Minute)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, took[0], time.Duration(0))
}

func TestParseCounted(t *testing.T) {
	u, err := parseCounted("100000000 52428800\n50000000 62914560\n")
	require.NoError(t, err)
	assert.Equal(t, jobUsage{Processes: 2, CPU: 150 * time.Millisecond, PeakRSS: 62914560}, u)
	_, err = parseCounted("12\n")
	assert.Error(t, err)
	d := u.since(jobUsage{Processes: 1, CPU: 100 * time.Millisecond})
	assert.Equal(t, 1, d.Processes)
	assert.Equal(t, 50*time.Millisecond, d.CPU)
}

func TestRequestShape(t *testing.T) {
	assert.Equal(t, "GET /repos/{owner}/{repo}/pulls", RequestShape("GET", "/api/v3/repos/petri-dev/hello/pulls"))
	assert.Equal(t, "POST /repos/{owner}/{repo}/statuses/{sha}", RequestShape("POST", "/api/v3/repos/petri-dev/hello/statuses/"+strings.Repeat("ab", 20)))
	assert.Equal(t, "PATCH /repos/{owner}/{repo}/issues/comments/{n}", RequestShape("PATCH", "/api/v3/repos/petri-dev/hello/issues/comments/1001"))
}

func TestWithAPIURL(t *testing.T) {
	out, err := WithAPIURL([]byte(`{"action":"opened","repository":{"url":"https://api.github.com/repos/a/b","name":"b"}}`), "http://127.0.0.1:9/", "petri-dev/hello")
	require.NoError(t, err)
	assert.Contains(t, string(out), `"url":"http://127.0.0.1:9/repos/petri-dev/hello"`)
	_, err = WithAPIURL([]byte(`{"action":"opened"}`), "http://x", "a/b")
	assert.Error(t, err)
}

func testResults() *Results {
	sys := func(name string, cpu time.Duration) SystemResult {
		return SystemResult{
			System:         name,
			Latency:        map[string]Dist{PhaseOpen: {N: 10, Median: 2 * time.Second, P99: 3 * time.Second}, PhasePush: {N: 10, Median: time.Second, P99: 2 * time.Second}, PhaseClose: {N: 10, Median: 4 * time.Second, P99: 5 * time.Second}},
			All:            map[string]time.Duration{PhaseOpen: 3 * time.Second, PhasePush: 2 * time.Second, PhaseClose: 5 * time.Second},
			Missing:        map[string]int{},
			CPU:            map[string]time.Duration{name + "-a": cpu, name + "-b": cpu},
			PeakRSS:        map[string]int64{name + "-a": 64 << 20, name + "-b": 32 << 20},
			APIRequests:    12.5,
			GitHubRequests: 3,
			GitHubByShape:  map[string]float64{"GET /repos/{owner}/{repo}/pulls": 2, "POST /repos/{owner}/{repo}/statuses/{sha}": 1},
			GitHubWrites:   1,
		}
	}
	return &Results{
		Machine: Machine{CPUs: 2, GoVersion: "go1.26.8", Date: time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC), LoadAverage: "1.00 1.00 1.00"},
		Sizes: []SizeResult{{PullRequests: 10, Systems: []SystemResult{
			withRestarts(sys(SystemPetri, time.Second), map[string]int{SystemPetri + "-a": 2}),
			sys(SystemArgoCD, 2*time.Second),
		}}},
		Took: time.Minute,
	}
}

func withRestarts(r SystemResult, restarts map[string]int) SystemResult {
	r.Restarts = restarts
	return r
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	testResults().WriteTable(&b)
	out := b.String()
	assert.Contains(t, out, "| 10 | Petri | 2.0 s / 3.0 s | 3.0 s | 1.0 s / 2.0 s | 2.0 s | 4.0 s / 5.0 s | 5.0 s | 0 | 2.0 s | 96 MiB | 12.5 | 3.0 | 1.0 |")
	assert.Contains(t, out, "| 10 | Argo CD | 2.0 s / 3.0 s | 3.0 s | 1.0 s / 2.0 s | 2.0 s | 4.0 s / 5.0 s | 5.0 s | 0 | 4.0 s | 96 MiB | 12.5 | 3.0 | 1.0 |")
	assert.Contains(t, out, "| 10 | Argo CD | Argo CD-a 2.0 s, 64 MiB; Argo CD-b 2.0 s, 32 MiB |")
	// A process that exited and was started again says so.
	assert.Contains(t, out, "| 10 | Petri | Petri-a 1.0 s, 64 MiB, restarted 2×; Petri-b 1.0 s, 32 MiB |")
	assert.Contains(t, out, "`GET /repos/{owner}/{repo}/pulls` 2.00, `POST /repos/{owner}/{repo}/statuses/{sha}` 1.00")
	assert.Contains(t, out, "| date | 2026-12-01 16:00 UTC |")
}

func TestContentGenerating(t *testing.T) {
	assert.Equal(t, 14.9, contentGenerating(map[string]float64{
		"PATCH /repos/{owner}/{repo}/issues/comments/{n}": 9.9, "POST /repos/{owner}/{repo}/statuses/{sha}": 4,
		"POST /repos/{owner}/{repo}/issues/{n}/comments": 1, "GET /repos/{owner}/{repo}/pulls": 0.85,
	}))
}

func TestReplaceBetween(t *testing.T) {
	doc := "# Benchmarks\n\nmine\n" + BeginMarker + "\nold\n" + EndMarker + "\nafter\n"
	out, err := ReplaceBetween(doc, "new\n")
	require.NoError(t, err)
	assert.Equal(t, "# Benchmarks\n\nmine\n"+BeginMarker+"\nnew\n"+EndMarker+"\nafter\n", out)
	_, err = ReplaceBetween("no markers", "x")
	assert.Error(t, err)
}
