package docscheck

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// RepoRoot is the directory holding go.mod, found upwards from the working
// directory (a test runs in its package's directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

var makeRule = regexp.MustCompile(`^([A-Za-z0-9_.%/-]+(?:\s+[A-Za-z0-9_.%/-]+)*)\s*:([^=]|$)`)

// MakeTargets reads the rule targets of a Makefile.
func MakeTargets(makefile string) (map[string]bool, error) {
	b, err := os.ReadFile(makefile)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if m := makeRule.FindStringSubmatch(l); m != nil {
			for _, t := range strings.Fields(m[1]) {
				out[t] = true
			}
		}
	}
	return out, nil
}

// StringConstants reads the values of the string constants declared in Go
// files (api/v1alpha1/conditions.go: every condition type and reason).
func StringConstants(files ...string) (map[string]bool, error) {
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[s] = true
				}
			}
			return true
		})
	}
	return out, nil
}

// JSONSchemaTree reads a JSON schema file (values.schema.json) as a Tree.
func JSONSchemaTree(file string) (*Tree, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return SchemaTree(s), nil
}
