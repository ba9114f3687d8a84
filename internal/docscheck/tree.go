package docscheck

import (
	"reflect"
	"regexp"
	"strings"
)

// Tree is a set of dotted paths: a chart's values, a config file's keys, a
// CRD's fields. Below a Free node every path exists (a free-form map).
type Tree struct {
	Kids map[string]*Tree
	Free bool
}

var index = regexp.MustCompile(`\[[^\]]*\]`)

// Has says whether the dotted path p exists; list indexes (components[],
// components[0]) are steps into a list's items and may be left out.
func (t *Tree) Has(p string) bool {
	if t == nil {
		return false
	}
	n := t
	for _, seg := range strings.Split(index.ReplaceAllString(p, ""), ".") {
		if n.Free {
			return true
		}
		next, ok := n.Kids[seg]
		if !ok {
			return false
		}
		n = next
	}
	return true
}

// HasTop says whether s is a top-level key.
func (t *Tree) HasTop(s string) bool {
	if t == nil {
		return false
	}
	_, ok := t.Kids[s]
	return ok
}

// Merge adds o's paths to t.
func (t *Tree) Merge(o *Tree) {
	if o == nil {
		return
	}
	t.Free = t.Free || o.Free
	for k, v := range o.Kids {
		if t.Kids == nil {
			t.Kids = map[string]*Tree{}
		}
		if t.Kids[k] == nil {
			t.Kids[k] = &Tree{}
		}
		t.Kids[k].Merge(v)
	}
}

// SchemaTree is the tree of an OpenAPI or JSON schema (a CRD's
// openAPIV3Schema, a chart's values.schema.json): properties are keys, a
// list's items are merged into the list, and an object that takes any key
// (additionalProperties, x-kubernetes-preserve-unknown-fields, no
// properties) is free.
func SchemaTree(s map[string]any) *Tree {
	t := &Tree{Kids: map[string]*Tree{}}
	if s == nil {
		return t
	}
	if items, ok := s["items"].(map[string]any); ok {
		t.Merge(SchemaTree(items))
	}
	props, _ := s["properties"].(map[string]any)
	for k, v := range props {
		sub, _ := v.(map[string]any)
		t.Kids[k] = SchemaTree(sub)
	}
	if s["x-kubernetes-preserve-unknown-fields"] == true {
		t.Free = true
	}
	switch ap := s["additionalProperties"].(type) {
	case bool:
		t.Free = t.Free || ap
	case map[string]any:
		t.Free = true
	}
	if s["type"] == "object" && props == nil && s["additionalProperties"] == nil {
		t.Free = true
	}
	return t
}

// TypeTree is the tree of the json field names of a Go type, as sync's
// config decoder reads them: maps and empty interfaces are free, and
// types with their own decoding (a duration, a quantity) are leaves.
func TypeTree(t reflect.Type) *Tree {
	return typeTree(t, map[reflect.Type]bool{})
}

func typeTree(t reflect.Type, seen map[reflect.Type]bool) *Tree {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	out := &Tree{Kids: map[string]*Tree{}}
	switch t.Kind() {
	case reflect.Map, reflect.Interface:
		out.Free = true
		return out
	case reflect.Struct:
	default:
		return out
	}
	if seen[t] {
		return out
	}
	// A raw JSON value (apiextensionsv1.JSON) holds any values.
	if f, ok := t.FieldByName("Raw"); ok && f.Type == reflect.TypeOf([]byte(nil)) {
		out.Free = true
		return out
	}
	seen[t] = true
	defer delete(seen, t)
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported() || name == "-":
			continue
		case name == "" && f.Anonymous:
			out.Merge(typeTree(f.Type, seen))
		case name != "":
			out.Kids[name] = typeTree(f.Type, seen)
		}
	}
	return out
}
