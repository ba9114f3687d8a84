// Loading: every config file of a revision decoded, checked and compiled;
// a broken file becomes a file:line error and leaves the others loaded.

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"go.yaml.in/yaml/v3"

	"github.com/petri-dev/petri/internal/redact"
)

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	swName       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	chartName    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)
	repoName     = regexp.MustCompile(`^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$`)
	exactVersion = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
)

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
	validateRepository(d, a)
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
	validateTrust(d, a)
	validatePlacement(d, a.Placement)
	validateMergeQueue(d, a)
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
		d.errorf(p+".repository", "%q must be an https:// chart repository, an oci:// reference or an absolute path inside the deployer image", redact.URL(c.Repository))
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
	if g := s.Spec.BindingSecret; g != nil {
		if len(g.Keys) == 0 {
			d.errorf("spec.bindingSecret.keys", "missing: list the keys generated for each binding")
		}
		for i, k := range g.Keys {
			p := fmt.Sprintf("spec.bindingSecret.keys[%d]", i)
			if _, ok := s.Spec.Binding[k]; ok {
				d.errorf(p, "%q is also a key of spec.binding; a binding key is either rendered or generated", k)
			}
			if s.Spec.InstanceSecret != nil && slices.Contains(s.Spec.InstanceSecret.Keys, k) {
				d.errorf(p, "%q is also a key of spec.instanceSecret.keys; an environment's keys and the instance's keys are apart", k)
			}
		}
		if g.Length != 0 && (g.Length < 16 || g.Length > 256) {
			d.errorf("spec.bindingSecret.length", "%d is not between 16 and 256", g.Length)
		}
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
