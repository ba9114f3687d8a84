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

func TestStage(t *testing.T) {
	rendered := map[string]string{"PGHOST": "pg.petri-shared.svc", "PGUSER": "env_ab12cd34"}
	generated := []string{"PGPASSWORD"}

	// A new binding: the rendered keys and a generated value, nothing else.
	first, changed, err := Stage(nil, rendered, generated, 24)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []byte("env_ab12cd34"), first["PGUSER"])
	assert.Len(t, first["PGPASSWORD"], 24)
	assert.Len(t, first, 3)

	// Staged again: the values it has are kept, nothing is written.
	again, changed, err := Stage(first, rendered, generated, 24)
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, first, again)

	// Staged by an earlier version, with the instance keys: they are left
	// out and the generated key is added; what was rendered is kept.
	legacy := map[string][]byte{"PGHOST": []byte("old.host"), "PGUSER": []byte("env_ab12cd34"), "ADMIN_PASSWORD": []byte("instance-secret"), "ROLE_KEY": []byte("role-key")}
	restaged, changed, err := Stage(legacy, rendered, generated, 24)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.NotContains(t, restaged, "ADMIN_PASSWORD")
	assert.NotContains(t, restaged, "ROLE_KEY")
	assert.Equal(t, []byte("old.host"), restaged["PGHOST"], "a staged value is never rewritten")
	assert.Len(t, restaged["PGPASSWORD"], 24)

	// A key generated for the binding that it already has keeps its value.
	kept, changed, err := Stage(map[string][]byte{"PGPASSWORD": []byte("kept"), "ADMIN_PASSWORD": []byte("x")}, nil, generated, 24)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, map[string][]byte{"PGPASSWORD": []byte("kept")}, kept)
}
