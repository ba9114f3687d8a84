package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/petri-dev/petri/sync/config"
)

// fuzzFile is where the fuzzed file sits; fixedFile is a valid file beside
// it that must keep loading whatever the fuzzed file holds.
const (
	fuzzFile  = "applications/fuzzed.yaml"
	fixedFile = "applications/zz-fixed.yaml"
	fixedName = "zz-fixed"
)

var fixed = []byte(strings.Replace(good, "name: shop", "name: "+fixedName, 1))

// FuzzLoad feeds arbitrary bytes to the config file decoder. The seeds are
// the example config repositories and the cases of the unit tests.
func FuzzLoad(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		files := map[string][]byte{fuzzFile: data, fixedFile: fixed}
		cfg := config.Load(files)
		checkLoaded(t, cfg, files)

		if again := config.Load(map[string][]byte{fuzzFile: bytes.Clone(data), fixedFile: fixed}); !reflect.DeepEqual(cfg, again) {
			t.Fatalf("loading the same files twice gave different results:\n%s\nthen\n%s", describe(cfg), describe(again))
		}

		// The fixed file loads unless the fuzzed one validly claims its name.
		if cfg.Application(fixedName) == nil {
			t.Fatalf("a valid file was hidden by a broken one: %s", describe(cfg))
		}

		checkWrittenBack(t, cfg)
	})
}

// addSeeds seeds the corpus: the examples' config files, the shop
// application broken in the ways people break it, placements, and
// documents that are hardly config at all.
func addSeeds(f *testing.F) {
	seeded := 0
	for _, root := range []string{
		filepath.Join("..", "..", "examples", "config-repo"),
		filepath.Join("..", "..", "examples", "app", "config-repo"),
	} {
		files, err := filepath.Glob(filepath.Join(root, "*", "*.yaml"))
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
			seeded++
		}
	}
	if seeded < 5 {
		f.Fatalf("found only %d example config files", seeded)
	}
	f.Add([]byte(good))
	for _, c := range [][2]string{
		{"  labels: [preview]", "  lables: [preview]"},
		{"maxEnvironments: 3", "maxEnvironments: three"},
		{"maxEnvironments: 3", "maxEnvironments: 99999999999999999999"},
		{"maxEnvironments: 3", "maxEnvironments: -1"},
		{`"~1.4"`, `"~1.x.y.z"`},
		{"'^feature/'", "'^(feature'"},
		{".ShortSHA", ".ShortSha"},
		{`"{{ .ShortSHA }}"`, `["{{ .Nubmer }}", {x: "{{ trunc -1 .Title }}"}, "{{ .Title"]`},
		{"dependsOn: [api]", "dependsOn: [db]"},
		{"dependsOn: [api]", "dependsOn: [web]"},
		{"    pullRequestValues:", "    dependsOn: [web]\n    pullRequestValues:"},
		{"ttl: 72h", "ttl: three days"},
		{"ttl: 72h", "ttl: -1h"},
		{"ttl: 72h", "ttl: [1]"},
		{"repository: acme/shop", "repository: shop"},
		{"https://charts.example.com", "http://charts.example.com"},
		{"oci://registry.example.com/charts", "/charts/api"},
		{"kind: Application", "kind: SharedWorkload"},
		{"kind: Application", "kind: App"},
		{"trigger:", "trigger: &t"},
		{"ttl: 72h", "ttl: *t"},
		{"url: \"https://pr-{{ .Number }}.example.com\"", "url: \"{{ range 3 }}{{ end }}\"\nartifactGate: {checkRun: a, statusContext: b}"},
	} {
		f.Add([]byte(strings.Replace(good, c[0], c[1], 1)))
	}
	f.Add([]byte(good + "  - bad: [\n"))
	f.Add([]byte(good + "---\nkind: Application\n"))
	f.Add([]byte(good + "color: blue\n"))
	for _, p := range []string{
		"{cluster: east}",
		"{cluster: east, requests: {cpu: 500m, memory: 1Gi}}",
		"{selector: {matchLabels: {region: eu}}, strategy: Spread, requests: {cpu: \"0.5\", memory: 1073741824}}",
		"{selector: {matchExpressions: [{key: tier, operator: In, values: [a, b]}, {key: x, operator: Exists}]}}",
		"{cluster: east, selector: {matchLabels: {region: eu}}}",
		"{strategy: RoundRobin}",
		"{cluster: east, requests: {cpu: lots, memory: -1Gi}}",
		"{selector: {matchLabels: {\"bad key!\": \"e u\"}, matchExpressions: [{key: r, operator: Near}]}}",
		"{selector: {}}",
		"{}",
	} {
		f.Add([]byte(good + "placement: " + p + "\n"))
	}
	for _, s := range []string{"", "---\n", "null", "[]", "kind: App\nname: x\n", "kind: [x]\n", "kind: SharedWorkload\nname: db\nspec: {}\n",
		"&a [*a]", "a: &a {b: *a}\nkind: Application\n", "\t", "kind: Application\nname: " + fixedName + "\n"} {
		f.Add([]byte(s))
	}
}

// checkWrittenBack checks that what loaded from the fuzzed file, written
// back out, loads to the same thing.
func checkWrittenBack(t *testing.T, cfg *config.Config) {
	t.Helper()
	for _, app := range cfg.Applications {
		if app.File != fuzzFile {
			continue
		}
		out := reencode(t, app)
		back := config.Load(map[string][]byte{fuzzFile: out})
		if len(back.Errors) > 0 || len(back.Applications) != 1 {
			t.Fatalf("application %s written back out does not load: %s\n%s", app.Name, describe(back), out)
		}
		if a, b := asJSON(t, app), asJSON(t, back.Applications[0]); a != b {
			t.Fatalf("application changed when written back out:\n%s\nthen\n%s", a, b)
		}
	}
	for _, sw := range cfg.SharedWorkloads {
		out := reencode(t, sw)
		back := config.Load(map[string][]byte{fuzzFile: out})
		if len(back.Errors) > 0 || len(back.SharedWorkloads) != 1 {
			t.Fatalf("shared workload %s written back out does not load: %s\n%s", sw.Name, describe(back), out)
		}
		if a, b := asJSON(t, sw), asJSON(t, back.SharedWorkloads[0]); a != b {
			t.Fatalf("shared workload changed when written back out:\n%s\nthen\n%s", a, b)
		}
	}
}

// checkLoaded checks what holds for every load: each error is located at a
// line of its file and prints as file:line: ...; a file is either loaded or
// broken, never both.
func checkLoaded(t *testing.T, cfg *config.Config, files map[string][]byte) {
	t.Helper()
	for _, e := range cfg.Errors {
		data, ok := files[e.File]
		if !ok {
			t.Fatalf("error names file %q, which was not loaded: %v", e.File, e)
		}
		// An empty document at the end of a file without a final line
		// break sits just past the last line.
		if lines := yamlLines(data) + 1; e.Line < 1 || e.Line > lines {
			t.Fatalf("error at line %d of a %d-line file: %v", e.Line, lines-1, e)
		}
		if prefix := fmt.Sprintf("%s:%d: ", e.File, e.Line); !strings.HasPrefix(e.Error(), prefix) || e.Message == "" {
			t.Fatalf("error %q does not start with %q and a message", e.Error(), prefix)
		}
		if _, ok := cfg.BrokenFiles[e.File]; !ok {
			t.Fatalf("file %s has an error but is not listed as broken: %v", e.File, e)
		}
	}
	loaded := map[string]bool{}
	for _, a := range cfg.Applications {
		loaded[a.File] = true
		if a.Name == "" || a.Line("name") < 1 {
			t.Fatalf("loaded application without a name or lines: %+v", a)
		}
	}
	for _, s := range cfg.SharedWorkloads {
		if loaded[s.File] {
			t.Fatalf("file %s loaded twice", s.File)
		}
		loaded[s.File] = true
	}
	for f := range cfg.BrokenFiles {
		if loaded[f] {
			t.Fatalf("file %s is both loaded and broken", f)
		}
	}
	for f := range files {
		_, broken := cfg.BrokenFiles[f]
		if !loaded[f] && !broken {
			t.Fatalf("file %s is neither loaded nor broken", f)
		}
	}
}

// yamlLines counts lines as YAML does: CR LF, CR, LF, NEL, LS and PS all
// end one.
func yamlLines(data []byte) int {
	s := strings.ReplaceAll(string(data), "\r\n", "\n")
	n := 1
	for _, r := range s {
		switch r {
		case '\r', '\n', '\u0085', '\u2028', '\u2029':
			n++
		}
	}
	return n
}

// reencode writes a loaded object back out as a config file. The decoded
// Go values go through JSON, where durations are numbers; config files
// spell them as strings.
func reencode(t *testing.T, v any) []byte {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(asJSON(t, v)))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	if app, ok := v.(*config.Application); ok {
		if app.TTL != nil {
			m["ttl"] = app.TTL.String()
		}
		for i, c := range app.Components {
			if c.Release.Timeout != nil {
				m["components"].([]any)[i].(map[string]any)["release"].(map[string]any)["timeout"] = c.Release.Timeout.String()
			}
		}
	}
	out, err := yaml.Marshal(numbersAsYAML(m))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// numbersAsYAML turns JSON numbers into YAML integers or floats, as they
// were read.
func numbersAsYAML(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbersAsYAML(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersAsYAML(e)
		}
	case json.Number:
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: x.String()}
		if strings.ContainsAny(x.String(), ".eE") {
			n.Tag = "!!float"
		}
		return n
	}
	return v
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func describe(cfg *config.Config) string {
	var b strings.Builder
	for _, a := range cfg.Applications {
		fmt.Fprintf(&b, "application %s from %s\n", a.Name, a.File)
	}
	for _, s := range cfg.SharedWorkloads {
		fmt.Fprintf(&b, "shared workload %s from %s\n", s.Name, s.File)
	}
	for _, e := range cfg.Errors {
		fmt.Fprintf(&b, "error %v\n", e)
	}
	return b.String()
}
