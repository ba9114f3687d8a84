// Package config reads Petri's declarative config repository: one YAML file
// per application (which GitHub repository, which pull requests, which
// charts with which values) and one per shared workload. Every problem is
// reported with its file, line and field, and a broken file never hides the
// other files.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	"github.com/Masterminds/semver/v3"
	"go.yaml.in/yaml/v3"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// APIVersion is the only apiVersion config files may name.
const APIVersion = "petri.dev/v1alpha1"

// Kinds of config files.
const (
	KindApplication    = "Application"
	KindSharedWorkload = "SharedWorkload"
)

// Application is one file of kind Application: the pull requests of one
// GitHub repository that become environments, and what those environments
// run.
type Application struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name identifies the application; environment names start with it.
	Name string `json:"name"`
	// Repository is the GitHub repository (owner/name) whose pull requests
	// spawn environments.
	Repository string `json:"repository"`
	// Trigger filters the pull requests.
	Trigger Trigger `json:"trigger"`
	// ArtifactGate names the CI result that must be successful on a head
	// commit before that commit is deployed.
	ArtifactGate *Gate `json:"artifactGate"`
	// Components are the environment's Helm releases.
	Components []Component `json:"components"`
	// SharedWorkloads the environment binds to.
	SharedWorkloads []string `json:"sharedWorkloads"`
	// TTL deletes an environment this long after it first became Ready for
	// the pull request's head commit (a push starts it again); sync
	// remembers the expiry in its comment, so an expired environment stays
	// gone until a push or a command brings it back.
	TTL *Duration `json:"ttl"`
	// KeepLabel, on a pull request, suspends expiry; DefaultKeepLabel when
	// empty.
	KeepLabel string `json:"keepLabel"`
	// SleepAfter puts an environment to sleep (its Deployments and
	// StatefulSets scaled to zero) after this long without a push or a
	// command; nil: never.
	SleepAfter *Duration `json:"sleepAfter"`
	// Deployments makes each environment a GitHub deployment of its head
	// commit, with deployment statuses.
	Deployments bool `json:"deployments"`
	// MaxEnvironments caps the environments of this application; 0 means no cap.
	MaxEnvironments int `json:"maxEnvironments"`
	// URL is a template of the address shown to reviewers.
	URL string `json:"url"`

	// File is the file the application was read from.
	File string `json:"-"`

	headBranch *regexp.Regexp
	baseBranch *regexp.Regexp
	lines      map[string]int
}

// Line returns the line of a field path (components[1].chart.version) in
// the application's file, so that problems found later, such as a chart
// version no repository satisfies, still point at their line.
func (a *Application) Line(field string) int {
	for p := field; ; {
		if l, ok := a.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return 1
		}
		p = p[:i]
	}
}

// Trigger selects pull requests.
type Trigger struct {
	// Labels must all be on the pull request.
	Labels []string `json:"labels"`
	// ExcludeLabels must all be absent.
	ExcludeLabels []string `json:"excludeLabels"`
	// Drafts lets draft pull requests have environments.
	Drafts bool `json:"drafts"`
	// HeadBranch and BaseBranch are regular expressions the branches must match.
	HeadBranch string `json:"headBranch"`
	BaseBranch string `json:"baseBranch"`
}

// Gate is an artifact gate: exactly one of its fields is set.
type Gate struct {
	CheckRun      string `json:"checkRun"`
	StatusContext string `json:"statusContext"`
}

// Component is one Helm release of the application.
type Component struct {
	Name  string `json:"name"`
	Chart Chart  `json:"chart"`
	// Values are static chart values, the same for every pull request.
	Values map[string]any `json:"values"`
	// PullRequestValues are values whose strings are templates over the pull
	// request; they end up in the environment's spec.values[name].
	PullRequestValues map[string]any `json:"pullRequestValues"`
	DependsOn         []string       `json:"dependsOn"`
	Uses              []string       `json:"uses"`
	Release           Release        `json:"release"`
}

// Chart references a chart; Version is exact or a semver constraint.
type Chart struct {
	Repository string `json:"repository"`
	Name       string `json:"name"`
	Version    string `json:"version"`
}

// Release tunes the Helm operation.
type Release struct {
	Wait    bool      `json:"wait"`
	Timeout *Duration `json:"timeout"`
}

// SharedWorkload is one file of kind SharedWorkload, applied as a
// SharedWorkload object; its chart version may be a constraint.
type SharedWorkload struct {
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Name       string                     `json:"name"`
	Spec       petriv1.SharedWorkloadSpec `json:"spec"`

	File string `json:"-"`
}

// Duration is a Go duration written as a string (72h, 90m).
type Duration struct{ time.Duration }

// UnmarshalJSON parses "72h".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := jsonUnmarshal(b, &s); err != nil {
		return fmt.Errorf("expected a duration such as 72h")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 72h or 30m", s)
	}
	if v <= 0 {
		return fmt.Errorf("duration %q must be positive", s)
	}
	d.Duration = v
	return nil
}

// Config is one revision of the config repository.
type Config struct {
	// Revision is the commit the files were read from.
	Revision        string
	Applications    []*Application
	SharedWorkloads []*SharedWorkload
	// Errors lists every problem; the files they are in are left out.
	Errors []*Error
	// BrokenFiles maps each file with errors to the application or shared
	// workload name it declares, as far as it could be read.
	BrokenFiles map[string]string
}

// Application returns the application of that name.
func (c *Config) Application(name string) *Application {
	for _, a := range c.Applications {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Repositories lists the GitHub repositories of all applications.
func (c *Config) Repositories() []string {
	var out []string
	for _, a := range c.Applications {
		if !slices.Contains(out, strings.ToLower(a.Repository)) {
			out = append(out, strings.ToLower(a.Repository))
		}
	}
	sort.Strings(out)
	return out
}

// IsConfigFile reports whether a repository path is read as config.
func IsConfigFile(p string) bool {
	ext := path.Ext(p)
	base := path.Base(p)
	return (ext == ".yaml" || ext == ".yml") && !strings.HasPrefix(base, ".")
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	swName       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	chartName    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)
	repoName     = regexp.MustCompile(`^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$`)
	exactVersion = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
)

// DefaultKeepLabel is the pull request label that suspends expiry when an
// application names none.
const DefaultKeepLabel = "petri/keep"

// Keep returns the label that suspends expiry.
func (a *Application) Keep() string {
	if a.KeepLabel == "" {
		return DefaultKeepLabel
	}
	return a.KeepLabel
}

// MaxApplicationName keeps environment names (name, pull request number and
// hash) short enough for the namespace names derived from them.
const MaxApplicationName = 30

// Load parses every config file; files maps repository paths to contents.
func Load(files map[string][]byte) *Config {
	cfg := &Config{BrokenFiles: map[string]string{}}
	paths := make([]string, 0, len(files))
	for p := range files {
		if IsConfigFile(p) {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	apps := map[string]string{}
	sws := map[string]string{}
	for _, p := range paths {
		app, sw, name, errs := loadFile(p, files[p])
		switch {
		case len(errs) > 0:
		case app != nil && apps[app.Name] != "":
			errs = []*Error{{File: p, Line: 1, Field: "name", Message: fmt.Sprintf("application %s is already declared in %s", app.Name, apps[app.Name])}}
		case sw != nil && sws[sw.Name] != "":
			errs = []*Error{{File: p, Line: 1, Field: "name", Message: fmt.Sprintf("shared workload %s is already declared in %s", sw.Name, sws[sw.Name])}}
		case app != nil:
			apps[app.Name] = p
			cfg.Applications = append(cfg.Applications, app)
		case sw != nil:
			sws[sw.Name] = p
			cfg.SharedWorkloads = append(cfg.SharedWorkloads, sw)
		}
		if len(errs) > 0 {
			cfg.Errors = append(cfg.Errors, errs...)
			cfg.BrokenFiles[p] = name
		}
	}
	return cfg
}

func loadFile(file string, data []byte) (*Application, *SharedWorkload, string, []*Error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		line := 1
		if m := regexp.MustCompile(`line (\d+)`).FindStringSubmatch(err.Error()); m != nil {
			fmt.Sscan(m[1], &line)
		}
		if errors.Is(err, io.EOF) {
			return nil, nil, "", []*Error{{File: file, Line: 1, Message: "file is empty"}}
		}
		msg := regexp.MustCompile(`^yaml: (line \d+: )?`).ReplaceAllString(err.Error(), "")
		return nil, nil, "", []*Error{{File: file, Line: line, Message: "invalid YAML: " + msg}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, "", []*Error{{File: file, Line: extra.Line, Message: "a config file holds exactly one document (one application or shared workload per file)"}}
	}
	root := doc.Content[0]
	d := &decoder{file: file, nodes: map[string]*yaml.Node{"": root}}
	if root.Kind != yaml.MappingNode {
		d.fail(root, "", "expected a mapping with kind, name and the fields of that kind")
		return nil, nil, "", d.errs
	}
	var head struct{ Kind, Name string }
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch root.Content[i].Value {
		case "kind":
			head.Kind = root.Content[i+1].Value
		case "name":
			head.Name = root.Content[i+1].Value
		}
	}
	switch head.Kind {
	case KindApplication:
		app := &Application{File: file}
		d.decode(root, reflectValue(app), "")
		if len(d.errs) == 0 {
			validateApplication(d, app)
		}
		if len(d.errs) > 0 {
			return nil, nil, head.Name, d.errs
		}
		app.lines = make(map[string]int, len(d.nodes))
		for p, n := range d.nodes {
			app.lines[p] = n.Line
		}
		return app, nil, app.Name, nil
	case KindSharedWorkload:
		sw := &SharedWorkload{File: file}
		d.decode(root, reflectValue(sw), "")
		if len(d.errs) == 0 {
			validateSharedWorkload(d, sw)
		}
		if len(d.errs) > 0 {
			return nil, nil, head.Name, d.errs
		}
		return nil, sw, sw.Name, nil
	case "":
		d.errorf("kind", "missing: kind must be %s or %s", KindApplication, KindSharedWorkload)
	default:
		d.errorf("kind", "unknown kind %q: kind must be %s or %s", head.Kind, KindApplication, KindSharedWorkload)
	}
	return nil, nil, head.Name, d.errs
}

func checkHeader(d *decoder, apiVersion string) {
	if apiVersion != "" && apiVersion != APIVersion {
		d.errorf("apiVersion", "unsupported %q: use %s", apiVersion, APIVersion)
	}
}

func validateApplication(d *decoder, a *Application) {
	checkHeader(d, a.APIVersion)
	switch {
	case a.Name == "":
		d.errorf("name", "missing")
	case len(a.Name) > MaxApplicationName || !dnsLabel.MatchString(a.Name):
		d.errorf("name", "%q must be lower-case letters, digits and '-', at most %d characters", a.Name, MaxApplicationName)
	}
	if !repoName.MatchString(a.Repository) {
		d.errorf("repository", "%q must be a GitHub repository written owner/name", a.Repository)
	}
	var err error
	if a.headBranch, err = compile(a.Trigger.HeadBranch); err != nil {
		d.errorf("trigger.headBranch", "invalid regular expression: %v", err)
	}
	if a.baseBranch, err = compile(a.Trigger.BaseBranch); err != nil {
		d.errorf("trigger.baseBranch", "invalid regular expression: %v", err)
	}
	for i, l := range a.Trigger.Labels {
		if slices.Contains(a.Trigger.ExcludeLabels, l) {
			d.errorf(fmt.Sprintf("trigger.labels[%d]", i), "label %q is both required and excluded", l)
		}
	}
	if g := a.ArtifactGate; g != nil && (g.CheckRun == "") == (g.StatusContext == "") {
		d.errorf("artifactGate", "set exactly one of checkRun and statusContext")
	}
	if a.MaxEnvironments < 0 {
		d.errorf("maxEnvironments", "must be 0 (no cap) or more")
	}
	if l := a.KeepLabel; l != "" && (len([]rune(l)) > 50 || strings.TrimSpace(l) != l) {
		d.errorf("keepLabel", "%q must be a GitHub label: at most 50 characters, no leading or trailing space", l)
	}
	for i, s := range a.SharedWorkloads {
		if !swName.MatchString(s) || len(s) > 253 {
			d.errorf(fmt.Sprintf("sharedWorkloads[%d]", i), "%q is not a valid shared workload name", s)
		}
	}
	if len(a.Components) == 0 {
		d.errorf("components", "at least one component is needed")
	}
	if len(a.Components) > 32 {
		d.errorf("components", "at most 32 components")
	}
	names := map[string]bool{}
	for i, c := range a.Components {
		p := fmt.Sprintf("components[%d]", i)
		switch {
		case !dnsLabel.MatchString(c.Name) || len(c.Name) > 53:
			d.errorf(p+".name", "%q must be lower-case letters, digits and '-', at most 53 characters", c.Name)
		case names[c.Name]:
			d.errorf(p+".name", "component %q is declared twice", c.Name)
		}
		names[c.Name] = true
		validateChart(d, p+".chart", c.Chart)
		for j, u := range c.Uses {
			if !slices.Contains(a.SharedWorkloads, u) {
				d.errorf(fmt.Sprintf("%s.uses[%d]", p, j), "%q is not listed in sharedWorkloads", u)
			}
		}
		if c.Release.Timeout != nil && c.Release.Timeout.Duration <= 0 {
			d.errorf(p+".release.timeout", "must be positive")
		}
		checkTemplates(d, p+".pullRequestValues", c.PullRequestValues)
	}
	for i, c := range a.Components {
		for j, dep := range c.DependsOn {
			switch {
			case dep == c.Name:
				d.errorf(fmt.Sprintf("components[%d].dependsOn[%d]", i, j), "component %q cannot depend on itself", dep)
			case !names[dep]:
				d.errorf(fmt.Sprintf("components[%d].dependsOn[%d]", i, j), "%q is not a component of this application", dep)
			}
		}
	}
	if cycle := findCycle(a.Components); cycle != "" {
		d.errorf("components", "dependsOn has a cycle: %s", cycle)
	}
	if a.URL != "" {
		if _, err := Render("url", a.URL, SampleData(a)); err != nil {
			d.errorf("url", "%v", err)
		}
	}
}

func validateChart(d *decoder, p string, c Chart) {
	switch {
	case strings.HasPrefix(c.Repository, "https://"), strings.HasPrefix(c.Repository, "oci://"):
	case strings.HasPrefix(c.Repository, "/"):
		if c.Version != "" && !exactVersion.MatchString(c.Version) {
			d.errorf(p+".version", "%q: a chart inside the deployer image needs an exact version", c.Version)
			return
		}
	default:
		d.errorf(p+".repository", "%q must be an https:// chart repository, an oci:// reference or an absolute path inside the deployer image", c.Repository)
	}
	if !chartName.MatchString(c.Name) {
		d.errorf(p+".name", "%q is not a valid chart name", c.Name)
	}
	if c.Version == "" {
		d.errorf(p+".version", "missing: an exact version (1.4.2) or a constraint (~1.4)")
		return
	}
	if !exactVersion.MatchString(c.Version) {
		if _, err := semver.NewConstraint(c.Version); err != nil {
			d.errorf(p+".version", "%q is neither an exact version nor a semver constraint: %v", c.Version, err)
		}
	}
}

func validateSharedWorkload(d *decoder, s *SharedWorkload) {
	checkHeader(d, s.APIVersion)
	if !swName.MatchString(s.Name) || len(s.Name) > 253 {
		d.errorf("name", "%q must be lower-case letters, digits, '-' and '.'", s.Name)
	}
	validateChart(d, "spec.chart", Chart{Repository: s.Spec.Chart.Repository, Name: s.Spec.Chart.Name, Version: s.Spec.Chart.Version})
	if s.Spec.Provision != nil && s.Spec.Provision.Image == "" {
		d.errorf("spec.provision.image", "missing")
	}
	if s.Spec.Deprovision != nil && s.Spec.Deprovision.Image == "" {
		d.errorf("spec.deprovision.image", "missing")
	}
}

// IsExactVersion reports whether a chart version needs no resolution.
func IsExactVersion(v string) bool { return exactVersion.MatchString(v) }

func compile(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	return regexp.Compile(expr)
}

func findCycle(cs []Component) string {
	deps := map[string][]string{}
	for _, c := range cs {
		deps[c.Name] = c.DependsOn
	}
	state := map[string]int{}
	var stack []string
	var visit func(string) string
	visit = func(n string) string {
		switch state[n] {
		case 1:
			i := slices.Index(stack, n)
			return strings.Join(append(slices.Clone(stack[i:]), n), " -> ")
		case 2:
			return ""
		}
		state[n] = 1
		stack = append(stack, n)
		for _, d := range deps[n] {
			if c := visit(d); c != "" {
				return c
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = 2
		return ""
	}
	for _, c := range cs {
		if cyc := visit(c.Name); cyc != "" {
			return cyc
		}
	}
	return ""
}

// checkTemplates parses and trial-runs every templated string, so that a
// mistyped field ({{ .Nubmer }}) is reported at load time with its line.
func checkTemplates(d *decoder, p string, v any) {
	switch x := v.(type) {
	case map[string]any:
		// Sorted, so that the same file always gives its errors in the
		// same order.
		for _, k := range slices.Sorted(maps.Keys(x)) {
			checkTemplates(d, join(p, k), x[k])
		}
	case []any:
		for i, e := range x {
			checkTemplates(d, fmt.Sprintf("%s[%d]", p, i), e)
		}
	case string:
		if _, err := Render(p, x, SampleData(nil)); err != nil {
			d.errorf(p, "%v", err)
		}
	}
}

// MatchResult says whether a pull request matches an application's trigger,
// and if not, why.
type MatchResult struct {
	Match  bool
	Reason string
}

// Matches applies the trigger filters to an open pull request.
func (a *Application) Matches(pr PullRequestView) MatchResult {
	if pr.Draft && !a.Trigger.Drafts {
		return MatchResult{Reason: "draft pull requests are off"}
	}
	for _, l := range a.Trigger.Labels {
		if !slices.Contains(pr.Labels, l) {
			return MatchResult{Reason: fmt.Sprintf("label %q is required", l)}
		}
	}
	for _, l := range a.Trigger.ExcludeLabels {
		if slices.Contains(pr.Labels, l) {
			return MatchResult{Reason: fmt.Sprintf("label %q is excluded", l)}
		}
	}
	if a.headBranch != nil && !a.headBranch.MatchString(pr.HeadBranch) {
		return MatchResult{Reason: fmt.Sprintf("head branch %q does not match %s", pr.HeadBranch, a.Trigger.HeadBranch)}
	}
	if a.baseBranch != nil && !a.baseBranch.MatchString(pr.BaseBranch) {
		return MatchResult{Reason: fmt.Sprintf("base branch %q does not match %s", pr.BaseBranch, a.Trigger.BaseBranch)}
	}
	return MatchResult{Match: true}
}

// PullRequestView is what the trigger filters look at.
type PullRequestView struct {
	Draft      bool
	Labels     []string
	HeadBranch string
	BaseBranch string
}

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
