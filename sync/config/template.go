// Templates: what a pull request's values and URL templates see, and how
// they are rendered.

package config

import (
	"fmt"
	"slices"
	"strings"
	"text/template"
)

// Data is what value and URL templates see.
type Data struct {
	Application string
	Repository  string
	Environment string
	Number      int
	SHA         string
	ShortSHA    string
	Branch      string
	BranchSlug  string
	BaseBranch  string
	Title       string
	Author      string
	Labels      []string
	URL         string
}

// SampleData is the data templates are trial-run with at load time.
func SampleData(a *Application) Data {
	d := Data{Application: "app", Repository: "owner/repo", Environment: "app-pr-1-abcdef", Number: 1,
		SHA: strings.Repeat("a", 40), ShortSHA: "aaaaaaa", Branch: "feature/x", BranchSlug: "feature-x",
		BaseBranch: "main", Title: "title", Author: "octocat", Labels: []string{"preview"}, URL: "https://github.com/owner/repo/pull/1"}
	if a != nil {
		d.Application, d.Repository = a.Name, a.Repository
	}
	return d
}

// Slug turns a branch name into a DNS label: lower case, runs of other
// characters as one '-', at most 63 characters.
func Slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimRight(b.String(), "-")
	if len(out) > 63 {
		out = strings.TrimRight(out[:63], "-")
	}
	return out
}

var funcs = template.FuncMap{
	"lower":   strings.ToLower,
	"upper":   strings.ToUpper,
	"slug":    Slug,
	"replace": func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
	"join":    func(sep string, l []string) string { return strings.Join(l, sep) },
	"trunc": func(n int, s string) string {
		if len(s) > n {
			return s[:n]
		}
		return s
	},
	"default": func(def, v string) string {
		if v == "" {
			return def
		}
		return v
	},
	"hasLabel": func(l string, labels []string) bool { return slices.Contains(labels, l) },
}

// Render executes one template string. Strings without "{{" are returned
// as they are.
func Render(name, text string, data Data) (string, error) {
	if !strings.Contains(text, "{{") {
		return text, nil
	}
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", fmt.Errorf("template: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("template: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	return b.String(), nil
}
