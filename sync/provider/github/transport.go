package github

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/provider/internal/forge"
)

// Observer receives one call per HTTP request that reached GitHub and the
// rate limit GitHub announced with it.
type Observer interface {
	GitHubRequest(method string, code int)
	GitHubRateLimit(remaining int, reset time.Time)
}

// observingTransport counts the requests that reached the network and reads
// the rate-limit headers of every answer.
type observingTransport struct {
	next http.RoundTripper
	obs  Observer
	mu   sync.Mutex
	rem  int
	rst  time.Time
}

func (t *observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := 0
	if resp != nil {
		code = resp.StatusCode
		if rem, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); err == nil {
			reset := time.Time{}
			if sec, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64); err == nil {
				reset = time.Unix(sec, 0)
			}
			t.mu.Lock()
			t.rem, t.rst = rem, reset
			t.mu.Unlock()
			if t.obs != nil {
				t.obs.GitHubRateLimit(rem, reset)
			}
		}
	}
	if t.obs != nil {
		t.obs.GitHubRequest(req.Method, code)
	}
	return resp, err
}

func (t *observingTransport) rateLimit() (int, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rem, t.rst
}

// etagTransport makes every GET conditional: it remembers the ETag and body
// of each 200 answer and turns a 304 back into that answer, so an unchanged
// listing costs no rate limit. Answers it restores carry X-From-Cache, which
// go-github reads.
type etagTransport struct {
	next    http.RoundTripper
	mu      sync.Mutex
	entries map[string]*etagEntry
	order   []string
	max     int
}

type etagEntry struct {
	etag   string
	header http.Header
	body   []byte
}

func newETagTransport(next http.RoundTripper, max int) *etagTransport {
	return &etagTransport{next: next, entries: map[string]*etagEntry{}, max: max}
}

func (t *etagTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return t.next.RoundTrip(req)
	}
	key := req.URL.String()
	t.mu.Lock()
	e := t.entries[key]
	t.mu.Unlock()
	if e != nil {
		req = req.Clone(req.Context())
		req.Header.Set("If-None-Match", e.etag)
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotModified && e != nil:
		_ = resp.Body.Close()
		h := e.header.Clone()
		for _, k := range []string{"X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Limit", "X-Ratelimit-Used"} {
			if v := resp.Header.Get(k); v != "" {
				h.Set(k, v)
			}
		}
		h.Set("X-From-Cache", "1")
		return &http.Response{
			Status: "200 OK", StatusCode: http.StatusOK, Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
			Header: h, Body: io.NopCloser(bytes.NewReader(e.body)), ContentLength: int64(len(e.body)), Request: req,
		}, nil
	case resp.StatusCode == http.StatusOK && resp.Header.Get("ETag") != "":
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		t.store(key, &etagEntry{etag: resp.Header.Get("ETag"), header: resp.Header.Clone(), body: body})
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	return resp, nil
}

func (t *etagTransport) store(key string, e *etagEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.entries[key]; !ok {
		t.order = append(t.order, key)
	}
	t.entries[key] = e
	for len(t.order) > t.max {
		delete(t.entries, t.order[0])
		t.order = t.order[1:]
	}
}

// Auth wraps a transport with GitHub credentials.
type Auth func(base http.RoundTripper, baseURL string) (http.RoundTripper, error)

// TokenFile authenticates with a token read from a file. The file is read
// again when it changes, so a rotated Secret takes effect without a restart.
// The token is never logged.
func TokenFile(path string) Auth {
	return func(base http.RoundTripper, _ string) (http.RoundTripper, error) {
		f := forge.NewTokenFile("github", path, "")
		if _, err := f.Token(); err != nil {
			return nil, err
		}
		return &forge.AuthTransport{Next: base, Scheme: "Bearer", Token: f.Token}, nil
	}
}

// App authenticates as a GitHub App installation. Installation tokens are
// requested from the API base URL and refreshed a minute before they expire.
func App(appID, installationID int64, privateKeyFile string) Auth {
	return func(base http.RoundTripper, baseURL string) (http.RoundTripper, error) {
		key, err := os.ReadFile(privateKeyFile)
		if err != nil {
			return nil, fmt.Errorf("github app private key: %w", err)
		}
		t, err := ghinstallation.New(base, appID, installationID, key)
		if err != nil {
			return nil, fmt.Errorf("github app private key %s: %w", privateKeyFile, err)
		}
		t.BaseURL = strings.TrimSuffix(baseURL, "/")
		apps, err := ghinstallation.NewAppsTransport(base, appID, key)
		if err != nil {
			return nil, fmt.Errorf("github app private key %s: %w", privateKeyFile, err)
		}
		apps.BaseURL = t.BaseURL
		return &appTransport{Transport: t, apps: apps, baseURL: baseURL}, nil
	}
}

// appTransport authenticates as an App installation and knows the App's
// bot login, which GET /app answers to the App's own JWT (an installation
// token may not ask).
type appTransport struct {
	*ghinstallation.Transport
	apps    *ghinstallation.AppsTransport
	baseURL string
}

// appLogin is the login of the App's bot, "<slug>[bot]": the author of
// every comment the App writes.
func (t *appTransport) appLogin(ctx context.Context) (string, error) {
	c := gh.NewClient(&http.Client{Transport: t.apps})
	u, err := url.Parse(t.baseURL)
	if err != nil {
		return "", err
	}
	c.BaseURL = u
	app, _, err := c.Apps.Get(ctx, "")
	if err != nil {
		return "", fmt.Errorf("read the GitHub App: %w", err)
	}
	if app.GetSlug() == "" {
		return "", errors.New("read the GitHub App: no slug in GitHub's answer")
	}
	return app.GetSlug() + "[bot]", nil
}
