package docscheck

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// Kinds of names the check knows, as problems and Allowed name them.
const (
	KindFlag     = "flag"
	KindCommand  = "kubectl petri command"
	KindTarget   = "make target"
	KindReason   = "condition reason"
	KindChart    = "chart value"
	KindConfig   = "config-repository key"
	KindCRDField = "CRD field"
	KindYAML     = "YAML example"
)

// Plugin is the binary name under which kubectl petri's flags are known.
const Plugin = "kubectl-petri"

// Problem is one name in the docs that the code does not have.
type Problem struct {
	File string
	Line int
	Kind string
	Word string
	Why  string
}

func (p Problem) String() string {
	if p.Word == "" {
		return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Kind, p.Why)
	}
	return fmt.Sprintf("%s:%d: %s %s: %s", p.File, p.Line, p.Kind, p.Word, p.Why)
}

// Known is everything the code has that docs may name, each set read from
// the code itself (see tests/docs).
type Known struct {
	// Flags are each binary's flag names, without dashes.
	Flags map[string]map[string]bool
	// PluginCommands are kubectl petri's subcommands.
	PluginCommands map[string]bool
	// MakeTargets are the Makefile's targets.
	MakeTargets map[string]bool
	// Reasons are the string constants of api/v1alpha1/conditions.go (and
	// of the deployer's results, api/contract), condition types included.
	Reasons map[string]bool
	// NotReasons are CamelCase words that are never reasons (the CRDs'
	// kinds): a reason line may name them.
	NotReasons map[string]bool
	// ChartValues, ConfigKeys and CRDFields are trees of the paths that
	// exist.
	ChartValues, ConfigKeys, CRDFields *Tree
	// YAML validates one YAML document of a doc (parsed already), through
	// sync's decoder or a CRD's schema; nil skips that.
	YAML func(file string, line int, text string) []Problem
}

// Check reads every doc by the package's rules and returns what the code
// does not have, in file and line order.
func Check(docs []Doc, k *Known) []Problem {
	c := &checker{k: k}
	for _, d := range docs {
		c.file = d.Path
		if d.IsYAMLFile() {
			c.yamlBlock(1, strings.Join(d.Lines, "\n"))
			continue
		}
		p := Parse(d)
		for _, s := range p.Code {
			c.codeSpan(s)
		}
		for _, s := range p.Shell {
			c.command(s)
		}
		for _, b := range p.Blocks {
			if b.Lang == "yaml" || b.Lang == "yml" {
				c.yamlBlock(b.Line, b.Text)
			}
		}
	}
	sort.SliceStable(c.out, func(i, j int) bool {
		if c.out[i].File != c.out[j].File {
			return c.out[i].File < c.out[j].File
		}
		return c.out[i].Line < c.out[j].Line
	})
	return c.out
}

type checker struct {
	k    *Known
	file string
	out  []Problem
}

func (c *checker) report(line int, kind, word, why string) {
	if _, ok := Allowed[kind][word]; ok {
		return
	}
	c.out = append(c.out, Problem{File: c.file, Line: line, Kind: kind, Word: word, Why: why})
}

var (
	flagWord   = regexp.MustCompile(`^--?[a-zA-Z][a-zA-Z0-9.-]*(=.*)?$`)
	dottedPath = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]*(\[[^\]]*\])?(\.[a-zA-Z][a-zA-Z0-9_]*(\[[^\]]*\])?)+$`)
	camelWord  = regexp.MustCompile(`^[A-Z][a-z0-9]+([A-Z][a-z0-9]*)+$`)
	reasonWord = regexp.MustCompile(`(?i)\breasons?\b`)
	fileExt    = regexp.MustCompile(`\.(md|ya?ml|json|go|txt|tpl|sh|lua|png|mod|sum|tar|gz|html|js|css|pem|crt|key)$`)
)

// codeSpan applies the rules of inline code to one span.
func (c *checker) codeSpan(s Span) {
	t := s.Text
	switch {
	case flagWord.MatchString(strings.Fields(t + " x")[0]):
		c.bareFlag(s.Line, strings.Fields(t)[0])
	case camelWord.MatchString(t):
		// Test names (TestFlags) are never reasons.
		if (s.ReasonColumn || reasonWord.MatchString(s.Context)) && !c.k.Reasons[t] && !c.k.NotReasons[t] && !strings.HasPrefix(t, "Test") {
			c.report(s.Line, KindReason, t, "not a constant of api/v1alpha1/conditions.go or api/contract")
		}
		return
	default:
		if p, ok := pathOf(t); ok {
			c.path(s.Line, p)
			return
		}
	}
	c.command(s)
}

// pathOf cuts a dotted path out of a span ("fences.enabled=false",
// "sync.github.enabled: false"); ok is false when the span is no path.
func pathOf(t string) (string, bool) {
	if i := strings.IndexAny(t, "=:"); i > 0 {
		t = strings.TrimSpace(t[:i])
	}
	if !dottedPath.MatchString(t) || fileExt.MatchString(t) {
		return "", false
	}
	return t, true
}

// path checks a dotted path by its first segment.
func (c *checker) path(line int, p string) {
	first := strings.SplitN(p, ".", 2)[0]
	first = strings.SplitN(first, "[", 2)[0]
	switch {
	case first == "spec" || first == "status":
		if c.k.CRDFields != nil && !c.k.CRDFields.Has(p) {
			c.report(line, KindCRDField, p, "no CRD of config/crd has it")
		}
	case c.k.ChartValues.HasTop(first) && c.k.ConfigKeys.HasTop(first):
		if !c.k.ChartValues.Has(p) && !c.k.ConfigKeys.Has(p) {
			c.report(line, KindChart, p, "neither charts/petri/values.schema.json nor sync's config decoder has it")
		}
	case c.k.ChartValues.HasTop(first):
		if !c.k.ChartValues.Has(p) {
			c.report(line, KindChart, p, "charts/petri/values.schema.json has no such value")
		}
	case c.k.ConfigKeys.HasTop(first):
		if !c.k.ConfigKeys.Has(p) {
			c.report(line, KindConfig, p, "sync's config decoder (sync/config) has no such field")
		}
	}
}

// bareFlag checks a flag named without its binary against them all.
func (c *checker) bareFlag(line int, w string) {
	name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
	for _, fs := range c.k.Flags {
		if fs[name] {
			return
		}
		if strings.HasSuffix(name, "-") {
			for f := range fs {
				if strings.HasPrefix(f, name) {
					return
				}
			}
		}
	}
	c.report(line, KindFlag, w, "no Petri binary has this flag")
}

// command reads one command line (or a code span) for binaries, kubectl
// petri, make and helm --set.
func (c *checker) command(s Span) {
	toks := words(s.Text)
	cur := ""
	for i := 0; i < len(toks); i++ {
		t := strings.Trim(toks[i], "()")
		base := path.Base(t)
		switch {
		case t == "kubectl" && i+1 < len(toks) && toks[i+1] == "petri":
			cur = Plugin
			i++
			if i+1 < len(toks) && !strings.HasPrefix(toks[i+1], "-") && !strings.HasPrefix(toks[i+1], "<") {
				i++
				// get|logs names several commands at once.
				for _, w := range strings.Split(toks[i], "|") {
					if !c.k.PluginCommands[w] {
						c.report(s.Line, KindCommand, w, "kubectl petri has no such command")
					}
				}
			}
		case t == "kubectl" || t == "helm" || t == "go" || t == "git" || t == "curl" || t == "docker":
			cur = ""
		case c.k.Flags[base] != nil && base != Plugin && i == firstWord(toks):
			cur = base
		case t == "make" && i == firstWord(toks):
			c.makeTargets(s.Line, toks[i+1:])
			return
		case (t == "--set" || t == "--set-string") && i+1 < len(toks):
			i++
			c.setValues(s.Line, toks[i])
		case strings.HasPrefix(t, "--set=") || strings.HasPrefix(t, "--set-string="):
			_, v, _ := strings.Cut(t, "=")
			c.setValues(s.Line, v)
		case cur != "" && flagWord.MatchString(t):
			name, _, _ := strings.Cut(strings.TrimLeft(t, "-"), "=")
			if !c.k.Flags[cur][name] {
				c.report(s.Line, KindFlag, t, cur+" has no such flag")
			}
		}
	}
}

// words splits a command line as a shell would, keeping quoted words
// (BENCH_FLAGS="-only scale") whole.
func words(line string) []string {
	var out []string
	var w strings.Builder
	quote, in := rune(0), false
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// firstWord is the index of a command's first word after VAR=value
// assignments and sudo.
func firstWord(toks []string) int {
	for i, t := range toks {
		if !strings.Contains(t, "=") && t != "sudo" && t != "env" {
			return i
		}
	}
	return len(toks)
}

func (c *checker) makeTargets(line int, args []string) {
	for _, a := range args {
		a = strings.Trim(a, `"'`)
		if a == "" || strings.Contains(a, "=") || strings.HasPrefix(a, "-") || strings.HasPrefix(a, "<") || strings.ContainsAny(a, "$`") {
			continue
		}
		if !c.k.MakeTargets[a] {
			c.report(line, KindTarget, a, "the Makefile has no such target")
		}
	}
}

func (c *checker) setValues(line int, arg string) {
	for _, kv := range strings.Split(strings.Trim(arg, `"'`), ",") {
		k, _, _ := strings.Cut(kv, "=")
		if k != "" && !c.k.ChartValues.Has(k) {
			c.report(line, KindChart, k, "charts/petri/values.schema.json has no such value")
		}
	}
}
