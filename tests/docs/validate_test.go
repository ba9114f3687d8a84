package docs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/petri-dev/petri/internal/docscheck"
	"github.com/petri-dev/petri/sync/config"
)

// crd is one custom resource's schema, as the API server applies it.
type crd struct {
	validator  validation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
	tree       map[string]any
}

// loadCRDs reads config/crd/bases: each kind's schema, and the tree of all
// their fields.
func loadCRDs(root string) (map[string]*crd, *docscheck.Tree, error) {
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, nil, fmt.Errorf("no CRDs in config/crd/bases: %v", err)
	}
	out := map[string]*crd{}
	fields := &docscheck.Tree{Kids: map[string]*docscheck.Tree{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		var def apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &def); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, v := range def.Spec.Versions {
			var internal apiextensions.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				return nil, nil, err
			}
			validator, _, err := validation.NewSchemaValidator(&internal)
			if err != nil {
				return nil, nil, err
			}
			ss, err := structuralschema.NewStructural(&internal)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: not a structural schema: %w", f, err)
			}
			raw, err := yaml.Marshal(v.Schema.OpenAPIV3Schema)
			if err != nil {
				return nil, nil, err
			}
			var tree map[string]any
			if err := yaml.Unmarshal(raw, &tree); err != nil {
				return nil, nil, err
			}
			fields.Merge(docscheck.SchemaTree(tree))
			out[def.Spec.Group+"/"+v.Name+"/"+def.Spec.Names.Kind] = &crd{validator: validator, structural: ss,
				cel: cel.NewValidator(ss, true, celconfig.PerCallLimit), tree: tree}
		}
	}
	return out, fields, nil
}

// yamlValidator is Known.YAML: a config-repository file through sync's
// decoder, a petri.dev object through its CRD's schema (unknown fields,
// the OpenAPI validation and the CEL rules), anything else only parsed.
func yamlValidator(crds map[string]*crd) func(file string, line int, text string) []docscheck.Problem {
	return func(file string, line int, text string) []docscheck.Problem {
		var head struct {
			APIVersion string         `json:"apiVersion"`
			Kind       string         `json:"kind"`
			Metadata   map[string]any `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(text), &head); err != nil {
			return []docscheck.Problem{{File: file, Line: line, Kind: docscheck.KindYAML, Why: err.Error()}}
		}
		switch {
		case head.Kind == config.KindApplication || head.Kind == config.KindSharedWorkload && head.Metadata == nil:
			if isConfigRepoFile(file) {
				return nil // read with the rest of its repository (TestExampleConfigRepositories)
			}
			return configProblems(file, line, map[string][]byte{"example.yaml": []byte(text)})
		case strings.HasPrefix(head.APIVersion, "petri.dev/"):
			c := crds[head.APIVersion+"/"+head.Kind]
			if c == nil {
				return []docscheck.Problem{{File: file, Line: line, Kind: docscheck.KindYAML, Word: head.APIVersion + " " + head.Kind, Why: "no CRD of config/crd serves it"}}
			}
			return c.problems(file, line, text)
		}
		return nil
	}
}

var placeholder = regexp.MustCompile(`<[a-z][a-z0-9 -]*>`)

// problems validates one object as the API server would on create.
func (c *crd) problems(file string, line int, text string) []docscheck.Problem {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(text), &obj); err != nil {
		return []docscheck.Problem{{File: file, Line: line, Kind: docscheck.KindYAML, Why: err.Error()}}
	}
	var out []docscheck.Problem
	add := func(word, why string) {
		out = append(out, docscheck.Problem{File: file, Line: line + lineOf(text, word) - 1, Kind: docscheck.KindYAML, Word: word, Why: why})
	}
	for _, p := range pruning.PruneWithOptions(obj, c.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		add(p, "the CRD has no such field")
	}
	for _, e := range validation.ValidateCustomResource(nil, obj, c.validator) {
		add(e.Field, e.ErrorBody())
	}
	if c.cel != nil {
		errs, _ := c.cel.Validate(context.Background(), nil, c.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		for _, e := range errs {
			add(e.Field, e.ErrorBody())
		}
	}
	return out
}

// lineOf finds the line (1-based, in text) of a field path's last key.
func lineOf(text, field string) int {
	key := field[strings.LastIndexAny(field, ".")+1:]
	key = strings.SplitN(key, "[", 2)[0]
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimLeft(strings.TrimLeft(l, " "), "- "), key+":") {
			return i + 1
		}
	}
	return 1
}

// configProblems loads config files through sync's decoder; line is the
// line of the first file's first line in its doc (0: the files are files).
func configProblems(file string, line int, files map[string][]byte) []docscheck.Problem {
	var out []docscheck.Problem
	for _, e := range config.Load(files).Errors {
		p := docscheck.Problem{File: file, Line: line + e.Line - 1, Kind: docscheck.KindConfig, Word: e.Field, Why: "sync's decoder: " + e.Message}
		if line == 0 {
			p.File, p.Line = e.File, e.Line
		}
		out = append(out, p)
	}
	return out
}

func isConfigRepoFile(file string) bool { return strings.Contains(file, "/config-repo/") }
