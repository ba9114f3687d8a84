package provider_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/provider"
)

func TestLoadWebhookSecrets(t *testing.T) {
	write := func(text string) string {
		p := filepath.Join(t.TempDir(), "secrets.yaml")
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	got, err := provider.LoadWebhookSecrets(write("Acme/Shop: s3cret-shop\nacme: s3cret-owner\nplatform/team: \" s3cret-team \"\n"))
	require.NoError(t, err)
	assert.Equal(t, map[string][]byte{"acme/shop": []byte("s3cret-shop"), "acme": []byte("s3cret-owner"), "platform/team": []byte("s3cret-team")}, got)

	s := provider.WebhookSecrets{Default: []byte("wide"), ByPath: got}
	assert.Equal(t, "s3cret-shop", string(s.For("ACME/shop")))
	assert.Equal(t, "s3cret-owner", string(s.For("acme/blog")), "an owner's secret")
	assert.Equal(t, "s3cret-team", string(s.For("platform/team/sub/api")), "the nearest group's")
	assert.Equal(t, "wide", string(s.For("platform/api")))
	assert.Equal(t, "wide", string(s.For("")), "a delivery naming no repository")

	for text, want := range map[string]string{
		"acme/shop: \"\"\n":                          "the secret of acme/shop is empty",
		"/acme: s3cret-x\n":                          `"/acme" is not a repository, owner or group path`,
		"acme//shop: s3cret-x\n":                     `"acme//shop" is not a repository`,
		"acme/shop: s3cret-a\nACME/shop: s3cret-b\n": "is given twice",
		"acme/shop: [s3cret-list]\n":                 "a value is not a string",
		"acme/shop: s3cret-x\n  bad: [\n":            "not valid YAML",
		"{}\n":                                       "no secrets",
	} {
		_, err := provider.LoadWebhookSecrets(write(text))
		if assert.Error(t, err, text) {
			assert.Contains(t, err.Error(), want, text)
			assert.NotContains(t, err.Error(), "s3cret", "no secret in the error of %q", text)
		}
	}
	_, err = provider.LoadWebhookSecrets(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
