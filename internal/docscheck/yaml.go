package docscheck

import (
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

var docSeparator = regexp.MustCompile(`^---\s*(#.*)?$`)

// yamlBlock checks each document of a YAML block or file: it must parse;
// a document with a kind goes to Known.YAML; one whose top-level keys are
// all the chart's is checked against the chart's values.
func (c *checker) yamlBlock(first int, text string) {
	lines := strings.Split(text, "\n")
	start := 0
	for i := 0; i <= len(lines); i++ {
		if i < len(lines) && !docSeparator.MatchString(lines[i]) {
			continue
		}
		c.yamlDocument(first+start, strings.Join(lines[start:i], "\n"))
		start = i + 1
	}
}

func (c *checker) yamlDocument(line int, text string) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(text), &n); err != nil {
		c.report(line, KindYAML, "", "does not parse: "+err.Error())
		return
	}
	if len(n.Content) == 0 || n.Content[0].Kind != yaml.MappingNode {
		return
	}
	root := n.Content[0]
	c.containerArgs(line, root)
	keys := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		keys[root.Content[i].Value] = root.Content[i+1]
	}
	if _, ok := keys["kind"]; ok {
		if c.k.YAML != nil {
			for _, p := range c.k.YAML(c.file, line, text) {
				c.report(p.Line, p.Kind, p.Word, p.Why)
			}
		}
		return
	}
	for k := range keys {
		if !c.k.ChartValues.HasTop(k) {
			return
		}
	}
	c.valuesPaths(line, root, "")
}

// valuesPaths checks every key path of a chart-values document.
func (c *checker) valuesPaths(first int, n *yaml.Node, prefix string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := strings.TrimPrefix(prefix+"."+k.Value, ".")
		if !c.k.ChartValues.Has(p) {
			c.report(first+k.Line-1, KindChart, p, "charts/petri/values.schema.json has no such value")
			continue
		}
		if v.Kind == yaml.MappingNode {
			c.valuesPaths(first, v, p)
		}
	}
}

// containerArgs checks the flags of every args: list (a container's, a
// Job's) against all of Petri's binaries.
func (c *checker) containerArgs(first int, n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "args" && v.Kind == yaml.SequenceNode {
				for _, a := range v.Content {
					if a.Kind == yaml.ScalarNode && flagWord.MatchString(a.Value) {
						c.bareFlag(first+a.Line-1, a.Value)
					}
				}
				continue
			}
			c.containerArgs(first, v)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, x := range n.Content {
			c.containerArgs(first, x)
		}
	}
}
