// Package values merges a component's Helm values with the resolved values
// its creator passed in spec.values.
package values

import (
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Merge deep-merges override over base: maps merge key by key, anything else
// in override replaces what base has. Both must be JSON objects (or absent).
func Merge(base, override *apiextensionsv1.JSON) (map[string]any, error) {
	b, err := object(base)
	if err != nil {
		return nil, fmt.Errorf("component values: %w", err)
	}
	o, err := object(override)
	if err != nil {
		return nil, fmt.Errorf("spec.values: %w", err)
	}
	return merge(b, o), nil
}

// YAML renders merged values as the deployer's values file.
func YAML(v map[string]any) ([]byte, error) {
	return yaml.Marshal(v)
}

func object(j *apiextensionsv1.JSON) (map[string]any, error) {
	out := map[string]any{}
	if j == nil || len(j.Raw) == 0 || string(j.Raw) == "null" {
		return out, nil
	}
	if err := json.Unmarshal(j.Raw, &out); err != nil {
		return nil, fmt.Errorf("values must be an object: %w", err)
	}
	return out, nil
}

func merge(base, override map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(override))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range override {
		if om, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}
