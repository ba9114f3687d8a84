package binding

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRender(t *testing.T) {
	d := Data{Environment: "shop-pr-1", Namespace: "shop-pr-1-ab12", SharedNamespace: "petri-shared", Hash: "ab12cd34"}
	cases := []struct {
		name    string
		in      map[string]string
		want    map[string]string
		wantErr string
	}{
		{"plain and templated", map[string]string{"port": "5432", "database": "env_{{ .Hash }}", "host": "pg.{{ .SharedNamespace }}.svc"},
			map[string]string{"port": "5432", "database": "env_ab12cd34", "host": "pg.petri-shared.svc"}, ""},
		{"unknown field", map[string]string{"db": "{{ .Nope }}"}, nil, "binding key db"},
		{"bad syntax", map[string]string{"db": "{{ .Hash "}, nil, "binding key db"},
		{"empty", nil, map[string]string{}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Render(tc.in, d)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestGenerate(t *testing.T) {
	a, err := Generate(32)
	require.NoError(t, err)
	b, err := Generate(32)
	require.NoError(t, err)
	assert.Len(t, a, 32)
	assert.NotEqual(t, a, b)
	assert.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9_-]{32}$`), a, "URL-safe")
}
