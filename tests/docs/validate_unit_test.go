package docs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/internal/docscheck"
)

// TestYAMLExamplesAreReadByTheirDecoders feeds the check pages whose YAML
// examples are wrong in the ways the docs have been: a config file's key
// in snake_case, a custom resource with a field its CRD does not have, a
// value of the wrong type, and the config file's form given as a CR.
func TestYAMLExamplesAreReadByTheirDecoders(t *testing.T) {
	root, err := docscheck.RepoRoot()
	require.NoError(t, err)
	k := known(t, root)
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"a config file with a snake_case gate", "kind: Application\nname: shop\nrepository: acme/shop\nartifactGate:\n  check_run: build\ncomponents:\n  - name: web\n    chart: {repository: oci://r.example.com/c, name: web, version: 1.0.0}",
			[]string{"docs/page.md:7: config-repository key artifactGate.check_run: sync's decoder: unknown field"}},
		{"a config file that decodes", "kind: Application\nname: shop\nrepository: acme/shop\nartifactGate:\n  checkRun: build\ncomponents:\n  - name: web\n    chart: {repository: oci://r.example.com/c, name: web, version: 1.0.0}", nil},
		{"a custom resource with an unknown field", "apiVersion: petri.dev/v1alpha1\nkind: EphemeralEnvironment\nmetadata: {name: shop-pr-1, namespace: petri-system}\nspec:\n  components:\n    - name: web\n      chart: {repository: /charts, name: web, version: 1.0.0}\n      retries: 3",
			[]string{"docs/page.md:10: YAML example spec.components[0].retries: the CRD has no such field"}},
		{"a custom resource with a value of the wrong type", "apiVersion: petri.dev/v1alpha1\nkind: EphemeralEnvironment\nmetadata: {name: shop-pr-1}\nspec:\n  components:\n    - name: web\n      chart: {repository: /charts, name: web, version: 1.0.0}\n  ttl: 3",
			[]string{`docs/page.md:10: YAML example spec.ttl: Invalid value: "number": spec.ttl in body must be of type string`}},
		{"a custom resource that validates", "apiVersion: petri.dev/v1alpha1\nkind: EphemeralEnvironment\nmetadata: {name: shop-pr-1}\nspec:\n  components:\n    - name: web\n      chart: {repository: /charts, name: web, version: 1.0.0}", nil},
		{"a kind no CRD serves", "apiVersion: petri.dev/v1alpha1\nkind: Environment\nmetadata: {name: x}",
			[]string{"docs/page.md:3: YAML example petri.dev/v1alpha1 Environment: no CRD of config/crd serves it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := "Example:\n```yaml\n" + tc.yaml + "\n```\n"
			var got []string
			for _, p := range docscheck.Check([]docscheck.Doc{{Path: "docs/page.md", Lines: strings.Split(page, "\n")}}, k) {
				got = append(got, p.String())
			}
			// The API server's messages may grow: each problem starts with
			// what is wanted.
			require.Len(t, got, len(tc.want), "%q", got)
			for i := range got {
				assert.True(t, strings.HasPrefix(got[i], tc.want[i]), "%q does not start with %q", got[i], tc.want[i])
			}
		})
	}
}
