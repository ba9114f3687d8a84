package redact_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/internal/redact"
)

const tok = "tok3n-PLANTED-9f8e7d"

func TestString(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		secrets        []string
	}{
		{name: "userinfo", in: `Get "https://ci:` + tok + `@charts.example/index.yaml": EOF`, want: `Get "https://***@charts.example/index.yaml": EOF`},
		{name: "user only", in: "fetch https://" + tok + "@charts.example/", want: "fetch https://***@charts.example/"},
		{name: "oci userinfo", in: "tags of oci://u:" + tok + "@registry.example/charts/api", want: "tags of oci://***@registry.example/charts/api"},
		{name: "query token", in: "https://charts.example/index.yaml?token=" + tok + "&page=2", want: "https://charts.example/index.yaml?token=***&page=2"},
		{name: "query access_token", in: "GET https://h/x?a=1&access_token=" + tok, want: "GET https://h/x?a=1&access_token=***"},
		{name: "query private_token", in: "GET https://h/x?private_token=" + tok + "#f", want: "GET https://h/x?private_token=***#f"},
		{name: "presigned", in: "https://b.s3/x?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=" + tok, want: "https://b.s3/x?X-Amz-Credential=***&X-Amz-Signature=***"},
		{name: "sig", in: "https://h/blob?sv=1&sig=" + tok, want: "https://h/blob?sv=1&sig=***"},
		{name: "key and password", in: "https://h/?key=" + tok + "&password=" + tok, want: "https://h/?key=***&password=***"},
		{name: "authorization header", in: "HTTP 401: echo Authorization: Bearer " + tok, want: "HTTP 401: echo Authorization: Bearer ***"},
		{name: "authorization json", in: `{"headers":{"Authorization":["Basic ` + tok + `"]}}`, want: `{"headers":{"Authorization":["Basic ***"]}}`},
		{name: "authorization no scheme", in: "authorization=" + tok, want: "authorization=***"},
		{name: "bearer quoted", in: "sent bearer " + tok + " to the realm", want: "sent bearer *** to the realm"},
		{name: "assignment", in: `config: {"token": "` + tok + `"}`, want: `config: {"token": "***"}`},
		{name: "known secret", in: "the server said: " + tok + " is wrong", want: "the server said: *** is wrong", secrets: []string{tok}},
		{name: "known secret escaped", in: "user=a%2Fb%3Fc", want: "user=***", secrets: []string{"a/b?c"}},
		{name: "known secret base64", in: "got " + base64.StdEncoding.EncodeToString([]byte(tok)), want: "got ***", secrets: []string{tok}},
		{name: "short secret ignored", in: "a b c", want: "a b c", secrets: []string{"a"}},
		{name: "plain text unchanged", in: "chart web version ~1.4: HTTP 404 from https://charts.example/index.yaml", want: "chart web version ~1.4: HTTP 404 from https://charts.example/index.yaml"},
		{name: "words unchanged", in: "unauthorized: authentication required; basic auth refused; secretKeyRef: x", want: "unauthorized: authentication required; basic auth refused; secretKeyRef: x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, redact.String(tc.in, tc.secrets...))
		})
	}
}

func TestSecretsOf(t *testing.T) {
	got := redact.SecretsOf("https://ci:" + tok + "@h/path?token=q1&page=2&X-Amz-Signature=q2")
	assert.ElementsMatch(t, []string{"ci", tok, "q1", "q2"}, got)
	assert.Empty(t, redact.SecretsOf("https://h/path?page=2"))
}

func TestErrorKeepsTheChain(t *testing.T) {
	err := redact.Error(fmt.Errorf("fetch https://u:%s@h/: %w", tok, fs.ErrNotExist))
	assert.NotContains(t, err.Error(), tok)
	assert.True(t, errors.Is(err, fs.ErrNotExist))
	wrapped := fmt.Errorf("load: %w", err)
	assert.NotContains(t, wrapped.Error(), tok)
	require.NoError(t, redact.Error(nil))
	plain := errors.New("nothing to hide")
	assert.Same(t, plain, redact.Error(plain))
}

type stringer string

func (s stringer) String() string { return string(s) }

func TestLogger(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
	log := redact.Logger(base, "known-"+tok).WithName("sync").WithValues("repository", "https://u:"+tok+"@h/")
	log.Info("Fetching https://h/?token="+tok, "url", "https://h/?access_token="+tok, "sent", []byte("Authorization: Bearer "+tok),
		"ref", stringer("oci://u:"+tok+"@r/c"), "count", 3)
	log.Error(fmt.Errorf("answer: known-%s", tok), "Failed", "err", errors.New("GET https://"+tok+"@h/"))
	require.Len(t, lines, 2)
	for _, l := range lines {
		assert.NotContains(t, l, tok)
	}
	assert.Contains(t, lines[0], `"count"=3`)
	assert.Contains(t, lines[0], "sync")
}
