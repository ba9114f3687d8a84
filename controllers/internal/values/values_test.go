package values

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func raw(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }

func TestMerge(t *testing.T) {
	cases := []struct {
		name           string
		base, override *apiextensionsv1.JSON
		want           map[string]any
	}{
		{"both absent", nil, nil, map[string]any{}},
		{"override only", nil, raw(`{"a":1}`), map[string]any{"a": float64(1)}},
		{"nested maps merge", raw(`{"image":{"repository":"r","tag":"old"},"replicas":1}`), raw(`{"image":{"tag":"new"}}`),
			map[string]any{"image": map[string]any{"repository": "r", "tag": "new"}, "replicas": float64(1)}},
		{"lists replace", raw(`{"hosts":["a","b"]}`), raw(`{"hosts":["c"]}`), map[string]any{"hosts": []any{"c"}}},
		{"scalar replaces map", raw(`{"x":{"y":1}}`), raw(`{"x":"flat"}`), map[string]any{"x": "flat"}},
		{"null override", raw(`{"a":1}`), raw(`null`), map[string]any{"a": float64(1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Merge(tc.base, tc.override)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestMergeRefusesNonObjects(t *testing.T) {
	_, err := Merge(raw(`[1]`), nil)
	assert.ErrorContains(t, err, "component values")
	_, err = Merge(nil, raw(`"x"`))
	assert.ErrorContains(t, err, "spec.values")
}

func TestMergeDoesNotModifyInputs(t *testing.T) {
	base := raw(`{"a":{"b":1}}`)
	_, err := Merge(base, raw(`{"a":{"c":2}}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":{"b":1}}`, string(base.Raw))
}
