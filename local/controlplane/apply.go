package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReadManifests parses every YAML document of the files into unstructured
// objects, skipping empty documents.
func ReadManifests(files ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			out = append(out, u)
		}
	}
	return out, nil
}

// Apply creates or updates the objects of the files with server-side apply.
func (c *Cluster) Apply(ctx context.Context, files ...string) error {
	objs, err := ReadManifests(files...)
	if err != nil {
		return err
	}
	for _, u := range objs {
		if err := c.Client.Patch(ctx, u, client.Apply, client.FieldOwner("petri-tests"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}
