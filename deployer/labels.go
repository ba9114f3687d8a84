package deployer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"helm.sh/helm/v3/pkg/postrender"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/petri-dev/petri/api/contract"
)

// releaseLabels is the post-renderer of every install and upgrade: it
// labels each object of the release's manifest contract.LabelRelease (the
// operator's health watch selects by it) and records on each Deployment and
// StatefulSet the replicas the manifest asked for
// (contract.AnnotationReplicas), so that a workload scaled to zero by
// someone else is told apart from one whose chart wants none. Hooks are not
// the release's workloads and Helm does not post-render them.
type releaseLabels struct{ release string }

var _ postrender.PostRenderer = releaseLabels{}

// Run rewrites the manifest's documents; comments and the documents'
// order of keys are not kept (Helm parses the result again either way).
// Numbers are read as they are written, never through a float.
func (l releaseLabels) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	docs := utilyaml.NewYAMLReader(bufio.NewReader(in))
	out := &bytes.Buffer{}
	for {
		raw, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("label the release's objects: %w", err)
		}
		data, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("label the release's objects: %w", err)
		}
		var doc map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, fmt.Errorf("label the release's objects: %w", err)
		}
		if len(doc) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: doc}
		if items, isList := doc["items"].([]any); isList && obj.IsList() {
			for _, item := range items {
				if m, ok := item.(map[string]any); ok {
					l.mark(&unstructured.Unstructured{Object: m})
				}
			}
		} else {
			l.mark(obj)
		}
		if data, err = yaml.Marshal(doc); err != nil {
			return nil, fmt.Errorf("label the release's objects: %w", err)
		}
		out.WriteString("---\n")
		out.Write(data)
	}
}

// mark labels one object and, for a Deployment or StatefulSet that names its
// replicas, records them. It works on the maps themselves: a manifest the
// API server would refuse (a label value that is a number) is passed on as
// it came, with the label added, for the API server to refuse.
func (l releaseLabels) mark(obj *unstructured.Unstructured) {
	meta, ok := obj.Object["metadata"].(map[string]any)
	if !ok {
		if obj.Object["metadata"] != nil {
			return
		}
		meta = map[string]any{}
		obj.Object["metadata"] = meta
	}
	setKey(meta, "labels", contract.LabelRelease, l.release)
	if obj.GetAPIVersion() != "apps/v1" || obj.GetKind() != "Deployment" && obj.GetKind() != "StatefulSet" {
		return
	}
	spec, _ := obj.Object["spec"].(map[string]any)
	if n, ok := spec["replicas"].(json.Number); ok {
		setKey(meta, "annotations", contract.AnnotationReplicas, n.String())
	}
}

// setKey sets key in the string map meta[field], making it when absent.
func setKey(meta map[string]any, field, key, value string) {
	m, ok := meta[field].(map[string]any)
	if !ok {
		if meta[field] != nil {
			return
		}
		m = map[string]any{}
		meta[field] = m
	}
	m[key] = value
}
