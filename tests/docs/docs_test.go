// Package docs holds the test that keeps README.md, docs/ and examples/
// true to the code: every flag, chart value, config-repository key, CRD
// field, condition reason, make target and kubectl petri command they name
// exists, and every YAML example parses with the decoder that reads it
// (internal/docscheck says how each kind of mention is recognised); and
// the operator's and sync's flag tables name every flag they have. It needs
// no control plane and runs in a second or two.
package docs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/internal/docscheck"
	"github.com/petri-dev/petri/sync/config"
)

// known reads what the code has: the binaries' flag inventories (kept true
// by each binary's TestFlags), the Makefile, the chart's schema, sync's
// decoder types, the CRDs and the reason constants.
func known(t *testing.T, root string) *docscheck.Known {
	t.Helper()
	flags, err := docscheck.ReadInventory(root)
	require.NoError(t, err)
	cmds, err := docscheck.ReadCommands(root)
	require.NoError(t, err)
	targets, err := docscheck.MakeTargets(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	chart, err := docscheck.JSONSchemaTree(filepath.Join(root, "charts", "petri", "values.schema.json"))
	require.NoError(t, err)
	reasons, err := docscheck.StringConstants(filepath.Join(root, "api", "v1alpha1", "conditions.go"), filepath.Join(root, "api", "contract", "result.go"))
	require.NoError(t, err)
	crds, fields, err := loadCRDs(root)
	require.NoError(t, err)
	keys := docscheck.TypeTree(reflect.TypeOf(config.Application{}))
	keys.Merge(docscheck.TypeTree(reflect.TypeOf(config.SharedWorkload{})))
	notReasons := map[string]bool{}
	for k := range crds {
		notReasons[k[strings.LastIndex(k, "/")+1:]] = true
	}
	return &docscheck.Known{Flags: flags, PluginCommands: cmds, MakeTargets: targets, Reasons: reasons, NotReasons: notReasons,
		ChartValues: chart, ConfigKeys: keys, CRDFields: fields, YAML: yamlValidator(crds)}
}

// TestDocsNameWhatExists is the check itself.
func TestDocsNameWhatExists(t *testing.T) {
	root, err := docscheck.RepoRoot()
	require.NoError(t, err)
	docs, err := docscheck.Load(root)
	require.NoError(t, err)
	for _, p := range docscheck.Check(docs, known(t, root)) {
		t.Errorf("%s", p)
	}
}

// TestExampleConfigRepositories loads each config repository under
// examples/ whole through sync's decoder, as sync reads one revision.
func TestExampleConfigRepositories(t *testing.T) {
	root, err := docscheck.RepoRoot()
	require.NoError(t, err)
	var repos []string
	require.NoError(t, filepath.WalkDir(filepath.Join(root, "examples"), func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() && e.Name() == "config-repo" {
			repos = append(repos, p)
		}
		return err
	}))
	require.NotEmpty(t, repos)
	for _, repo := range repos {
		files := map[string][]byte{}
		require.NoError(t, filepath.WalkDir(repo, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(repo, p)
			if config.IsConfigFile(filepath.ToSlash(rel)) {
				b, err := os.ReadFile(p)
				files[filepath.ToSlash(rel)] = b
				return err
			}
			return nil
		}))
		require.NotEmpty(t, files, repo)
		rel, _ := filepath.Rel(root, repo)
		for _, p := range configProblems(rel, 0, files) {
			p.File = filepath.ToSlash(filepath.Join(rel, p.File))
			t.Errorf("%s", p)
		}
	}
}

// TestFlagTablesNameEveryFlag keeps the flag tables whole: every flag of
// the operator is in install.md's table, every flag of sync in sync.md's.
func TestFlagTablesNameEveryFlag(t *testing.T) {
	root, err := docscheck.RepoRoot()
	require.NoError(t, err)
	flags, err := docscheck.ReadInventory(root)
	require.NoError(t, err)
	for _, tc := range []struct{ binary, file, heading string }{
		{"petri-operator", "docs/install.md", "## Operator flags"},
		{"petri-sync", "docs/sync.md", "## Flags"},
	} {
		b, err := os.ReadFile(filepath.Join(root, tc.file))
		require.NoError(t, err)
		text := string(b)
		start := strings.Index(text, "\n"+tc.heading+"\n")
		require.GreaterOrEqual(t, start, 0, "%s has no %q", tc.file, tc.heading)
		section := text[start+len(tc.heading)+2:]
		if end := strings.Index(section, "\n## "); end >= 0 {
			section = section[:end]
		}
		named := map[string]bool{}
		for _, m := range tableFlag.FindAllStringSubmatch(section, -1) {
			named[m[1]] = true
		}
		require.NotEmpty(t, flags[tc.binary], tc.binary)
		for f := range flags[tc.binary] {
			if f != "h" && f != "help" && !named[f] {
				t.Errorf("%s's table (%s) leaves out %s's flag -%s", tc.file, tc.heading, tc.binary, f)
			}
		}
	}
}

var tableFlag = regexp.MustCompile("`--?([a-z][a-z0-9-]*)")
