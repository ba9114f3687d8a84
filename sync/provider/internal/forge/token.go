package forge

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenFile is a token read from a file and read again whenever the file's
// modification time changes, so a rotated Secret takes effect without a
// restart. While the file cannot be seen, the last token read (or the
// initial one) stays in use. The token is never logged.
type TokenFile struct {
	forge string
	path  string

	mu    sync.Mutex
	mtime time.Time
	tok   string
}

// NewTokenFile reads nothing yet; forge ("github", "gitea") begins its
// errors. initial, when not empty, is the token until the file is first
// read.
func NewTokenFile(forge, path, initial string) *TokenFile {
	return &TokenFile{forge: forge, path: path, tok: initial}
}

// Token is the file's current token.
func (t *TokenFile) Token() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fi, err := os.Stat(t.path)
	if err != nil {
		if t.tok != "" {
			return t.tok, nil
		}
		return "", fmt.Errorf("%s token file: %w", t.forge, err)
	}
	if t.tok == "" || !fi.ModTime().Equal(t.mtime) {
		data, err := os.ReadFile(t.path)
		if err != nil {
			return "", fmt.Errorf("%s token file: %w", t.forge, err)
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return "", fmt.Errorf("%s token file %s is empty", t.forge, t.path)
		}
		t.tok, t.mtime = tok, fi.ModTime()
	}
	return t.tok, nil
}

// AuthTransport adds "Authorization: <Scheme> <token>" to each request,
// asking Token each time.
type AuthTransport struct {
	Next   http.RoundTripper
	Scheme string
	Token  func() (string, error)
}

// RoundTrip implements http.RoundTripper.
func (t *AuthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := t.Token()
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", t.Scheme+" "+tok)
	return t.Next.RoundTrip(req)
}
