package docscheck

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testKnown() *Known {
	chart := SchemaTree(map[string]any{"type": "object", "properties": map[string]any{
		"fences": map[string]any{"type": "object", "properties": map[string]any{"enabled": map[string]any{"type": "boolean"}}},
		"sync": map[string]any{"type": "object", "properties": map[string]any{
			"podAnnotations": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}}},
	}})
	type gate struct {
		CheckRun string `json:"checkRun"`
	}
	type app struct {
		Kind         string         `json:"kind"`
		ArtifactGate *gate          `json:"artifactGate"`
		Values       map[string]any `json:"values"`
	}
	crd := SchemaTree(map[string]any{"properties": map[string]any{
		"spec": map[string]any{"properties": map[string]any{
			"components": map[string]any{"type": "array", "items": map[string]any{"properties": map[string]any{"name": map[string]any{"type": "string"}}}}}},
		"status": map[string]any{"properties": map[string]any{"targetNamespace": map[string]any{"type": "string"}}},
	}})
	return &Known{
		Flags: map[string]map[string]bool{
			"petri-sync":     {"ui": true, "gitlab-url": true, "h": true},
			"petri-operator": {"require-fences": true},
			Plugin:           {"wait": true, "n": true},
		},
		PluginCommands: map[string]bool{"get": true, "sleep": true},
		MakeTargets:    map[string]bool{"test": true, "demo": true},
		Reasons:        map[string]bool{"DeployFailed": true, "WorkloadsIntact": true},
		NotReasons:     map[string]bool{"EphemeralEnvironment": true},
		ChartValues:    chart,
		ConfigKeys:     TypeTree(reflectTypeOf(app{})),
		CRDFields:      crd,
	}
}

func check(t *testing.T, page string) []string {
	t.Helper()
	var out []string
	for _, p := range Check([]Doc{{Path: "docs/page.md", Lines: strings.Split(page, "\n")}}, testKnown()) {
		out = append(out, p.String())
	}
	return out
}

func TestCheckNamesEachMentionThatDoesNotExist(t *testing.T) {
	for _, tc := range []struct {
		name, page string
		want       []string
	}{
		{"a flag alone in a code span", "Set `-web-ui=false` to hide it.",
			[]string{"docs/page.md:1: flag -web-ui=false: no Petri binary has this flag"}},
		{"a flag that exists", "Set `-ui=false` or `--require-fences=false`; `-gitlab-` flags.", nil},
		{"a flag of the binary named first", "Run `petri-sync -require-fences`.",
			[]string{"docs/page.md:1: flag -require-fences: petri-sync has no such flag"}},
		{"a binary's name as an argument is not a command", "`kubectl -n petri-sync create secret generic petri-sync --from-file=x`", nil},
		{"a shell block", "```sh\n# comment -nope\nbin/petri-sync -ui \\\n  -gitlab-token-file t && make demo lint\n```",
			[]string{"docs/page.md:3: flag -gitlab-token-file: petri-sync has no such flag", "docs/page.md:3: make target lint: the Makefile has no such target"}},
		{"an untagged block is not read", "```\npetri-sync -nope\n```", nil},
		{"kubectl petri commands and flags", "`kubectl petri nap shop-pr-1` and `kubectl petri get|sleep|wake --wait` and `kubectl petri sleep --later`",
			[]string{"docs/page.md:1: kubectl petri command nap: kubectl petri has no such command",
				"docs/page.md:1: kubectl petri command wake: kubectl petri has no such command",
				"docs/page.md:1: flag --later: kubectl-petri has no such flag"}},
		{"make targets and variables", "`make demo CLUSTERS=3` and `make tests` and `make bench BENCH_FLAGS=\"-only scale\"`",
			[]string{"docs/page.md:1: make target tests: the Makefile has no such target", "docs/page.md:1: make target bench: the Makefile has no such target"}},
		{"chart values", "`fences.enable=false`, `fences.enabled`, `sync.podAnnotations.foo` and `helm install --set fences.enabled=true,sync.replicas=2`",
			[]string{"docs/page.md:1: chart value fences.enable: charts/petri/values.schema.json has no such value",
				"docs/page.md:1: chart value sync.replicas: charts/petri/values.schema.json has no such value"}},
		{"config keys", "`artifactGate.checkRun` but not `artifactGate.check_run` (`values.anything` is free)",
			[]string{"docs/page.md:1: config-repository key artifactGate.check_run: sync's config decoder (sync/config) has no such field"}},
		{"CRD fields", "`spec.components[].name`, `status.targetNamespace`, `spec.components[].retry`",
			[]string{"docs/page.md:1: CRD field spec.components[].retry: no CRD of config/crd has it"}},
		{"file names are no paths", "`fences.yaml` and `sync.md`", nil},
		{"reasons on a line that says reason", "Ready has reason `DeployFailed` or `DeployFaild`; an `EphemeralEnvironment`; `TestReasons`.\nPlain line: `SomeType`.",
			[]string{"docs/page.md:1: condition reason DeployFaild: not a constant of api/v1alpha1/conditions.go or api/contract"}},
		{"reasons in a table's reason column", "| reason | what |\n|---|---|\n| `DeployFailed` | `OtherThing` |\n| `NoSuchReason` | x |",
			[]string{"docs/page.md:4: condition reason NoSuchReason: not a constant of api/v1alpha1/conditions.go or api/contract"}},
		{"a code span across lines", "Give `petri-sync\n-nope` there.",
			[]string{"docs/page.md:1: flag -nope: petri-sync has no such flag"}},
		{"allowed words", "`kubectl apply --server-side -k .` and `-trimpath` and reason `CrashLoopBackOff`", nil},
		{"a YAML block that does not parse", "```yaml\na: 'it's'\n```",
			[]string{"docs/page.md:2: YAML example: does not parse: yaml: did not find expected key"}},
		{"container args in a YAML block", "```yaml\nkind: Deployment\nspec:\n  containers:\n    - args:\n        - -ui=false\n        - --no-such-flag\n        - plain\n```",
			[]string{"docs/page.md:7: flag --no-such-flag: no Petri binary has this flag"}},
		{"a chart-values block", "```yaml\nfences:\n  enabled: true\n  mode: strict\n```",
			[]string{"docs/page.md:4: chart value fences.mode: charts/petri/values.schema.json has no such value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, check(t, tc.page))
		})
	}
}

func TestCheckHandsObjectsToTheValidator(t *testing.T) {
	k := testKnown()
	var got []string
	k.YAML = func(file string, line int, text string) []Problem {
		got = append(got, text)
		return []Problem{{File: file, Line: line, Kind: KindYAML, Word: "spec.x", Why: "no"}}
	}
	page := "text\n```yaml\nkind: A\n---\nkind: B\n```"
	ps := Check([]Doc{{Path: "p.md", Lines: strings.Split(page, "\n")}}, k)
	require.Equal(t, []string{"kind: A", "kind: B"}, got)
	require.Len(t, ps, 2)
	assert.Equal(t, "p.md:3: YAML example spec.x: no", ps[0].String())
	assert.Equal(t, 5, ps[1].Line)
}

func TestUsageFlags(t *testing.T) {
	usage := "Usage of petri-sync:\n  -config-repo string\n    \tConfig repository (-not-a-flag)\n  -test.v\n    \tverbose\n  -ui\n    \tServe the page (default true)\n"
	assert.Equal(t, []string{"config-repo", "ui"}, UsageFlags(usage))
}

func TestTree(t *testing.T) {
	tr := SchemaTree(map[string]any{"properties": map[string]any{
		"a": map[string]any{"type": "array", "items": map[string]any{"properties": map[string]any{"b": map[string]any{}}}},
		"m": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
	}})
	assert.True(t, tr.Has("a[].b"))
	assert.True(t, tr.Has("a[0].b"))
	assert.True(t, tr.Has("a.b"))
	assert.False(t, tr.Has("a.c"))
	assert.True(t, tr.Has("m.anything.below"))
	assert.False(t, tr.Has("z"))
}

func reflectTypeOf(v any) reflect.Type { return reflect.TypeOf(v) }
