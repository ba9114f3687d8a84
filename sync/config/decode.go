package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Error is one problem in a config file, located by file, line and field so
// that the person who wrote it finds it at once.
type Error struct {
	File    string
	Line    int
	Field   string
	Message string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Message)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Message)
}

// decoder decodes a YAML node into Go values strictly (unknown fields are
// errors) and remembers the node of every field path, so later checks can
// point at the right line.
type decoder struct {
	file  string
	errs  []*Error
	nodes map[string]*yaml.Node
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: path, Message: fmt.Sprintf(format, args...)})
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	quantityType    = reflect.TypeFor[resource.Quantity]()
	// quantityExponent finds the digits of a quantity's exponent (1e-9).
	quantityExponent = regexp.MustCompile(`[eE][-+]?0*([0-9]+)$`)
)

// decodeQuantity reads a Kubernetes quantity (500m, 2, 1Gi), written as a
// string or a number, with a message that says what one looks like rather
// than the parser's regular expression.
func (d *decoder) decodeQuantity(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Tag == "!!bool" {
		d.fail(n, path, "expected a quantity such as 500m, 2 or 1Gi, got %s", kindName(n))
		return
	}
	// The parser's time grows with a negative exponent's size (1e-9999999
	// takes seconds): no quantity a cluster counts needs more than two
	// digits of exponent, nor more than 64 characters.
	if m := quantityExponent.FindStringSubmatch(n.Value); len(n.Value) > 64 || m != nil && len(m[1]) > 2 {
		d.fail(n, path, "%q is not a quantity such as 500m, 2 or 1Gi (at most 64 characters and an exponent of two digits)", n.Value)
		return
	}
	q, err := resource.ParseQuantity(n.Value)
	if err != nil {
		d.fail(n, path, "%q is not a quantity such as 500m, 2 or 1Gi", n.Value)
		return
	}
	v.Set(reflect.ValueOf(q))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!null":
		return "null"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "a string"
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.nodes[path] = n
	t := v.Type()
	if t == quantityType {
		d.decodeQuantity(n, v, path)
		return
	}
	if t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(unmarshalerType) {
		var x any
		if err := n.Decode(&x); err != nil {
			d.fail(n, path, "%v", err)
			return
		}
		raw, err := json.Marshal(normalize(x))
		if err == nil {
			err = v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw)
		}
		if err != nil {
			d.fail(n, path, "%v", err)
		}
		d.record(n, path)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if n.Tag == "!!null" {
			return
		}
		p := reflect.New(t.Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		if n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.MappingNode || t.Key().Kind() != reflect.String {
			d.fail(n, path, "expected a mapping, got %s", kindName(n))
			return
		}
		m := reflect.MakeMap(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			e := reflect.New(t.Elem()).Elem()
			d.decode(val, e, join(path, k.Value))
			m.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), e)
		}
		v.Set(m)
	case reflect.Slice:
		if n.Tag == "!!null" {
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "expected a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Interface:
		var x any
		if err := n.Decode(&x); err != nil {
			d.fail(n, path, "%v", err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(normalize(x)))
		}
		d.record(n, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
			d.fail(n, path, "expected a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || err != nil {
			d.fail(n, path, "expected true or false, got %s", kindName(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil || v.OverflowInt(i) {
			d.fail(n, path, "expected a whole number, got %s %q", kindName(n), n.Value)
			return
		}
		v.SetInt(i)
	default:
		d.fail(n, path, "cannot decode into %s", t)
	}
}

// decodeStruct decodes a mapping into a struct by its json field names; an
// unknown field or one given twice is an error at its line.
func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	t := v.Type()
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	fields := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		fields[name] = i
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		fp := join(path, k.Value)
		idx, ok := fields[k.Value]
		switch {
		case !ok:
			d.fail(k, fp, "unknown field")
			continue
		case seen[k.Value]:
			d.fail(k, fp, "field given twice")
			continue
		}
		seen[k.Value] = true
		d.decode(val, v.Field(idx), fp)
	}
}

// record remembers the nodes below a free-form value (Helm values), so that
// checks of templated values can name their line.
func (d *decoder) record(n *yaml.Node, path string) {
	d.nodes[path] = n
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			d.record(n.Content[i+1], join(path, n.Content[i].Value))
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.record(c, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

// normalize turns YAML's decoded maps into JSON-compatible ones.
func normalize(x any) any {
	switch v := x.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normalize(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = normalize(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = normalize(e)
		}
		return v
	}
	return x
}

// line returns the line of a field path, or of its closest known parent.
func (d *decoder) line(path string) int {
	for p := path; ; {
		if n, ok := d.nodes[p]; ok {
			return n.Line
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			if n, ok := d.nodes[""]; ok {
				return n.Line
			}
			return 1
		}
		p = p[:i]
	}
}

// errorf adds a semantic error located at a field path.
func (d *decoder) errorf(path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: d.line(path), Field: path, Message: fmt.Sprintf(format, args...)})
}

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
