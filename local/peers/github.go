package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// githubCounter is a reverse proxy in front of the GitHub stand-in for one
// system, counting the requests that system makes by shape (method and
// path with numbers and commits replaced), so that each system's GitHub
// requests are counted apart on the one stand-in both read.
type githubCounter struct {
	srv    *http.Server
	URL    string
	mu     sync.Mutex
	counts map[string]int
}

func newGitHubCounter(target string) (*githubCounter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ports, err := benchkit.FreePorts(1)
	if err != nil {
		return nil, err
	}
	g := &githubCounter{counts: map[string]int{}, URL: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	g.srv = &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.counts[RequestShape(r.Method, r.URL.Path)]++
		g.mu.Unlock()
		proxy.ServeHTTP(w, r)
	})}
	ready := make(chan error, 1)
	go func() { ready <- nil; _ = g.srv.ListenAndServe() }()
	<-ready
	return g, nil
}

// snapshot is the counts so far.
func (g *githubCounter) snapshot() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int, len(g.counts))
	for k, v := range g.counts {
		out[k] = v
	}
	return out
}

func (g *githubCounter) close() { _ = g.srv.Close() }

var (
	shaSegment    = regexp.MustCompile(`/[0-9a-f]{40}(/|$)`)
	numberSegment = regexp.MustCompile(`/[0-9]+(/|$)`)
	repoSegment   = regexp.MustCompile(`^/repos/[^/]+/[^/]+`)
)

// RequestShape is a GitHub API request's method and path with the API's
// prefix dropped and the repository, numbers and commits replaced.
func RequestShape(method, path string) string {
	path = strings.TrimPrefix(path, "/api/v3")
	path = repoSegment.ReplaceAllString(path, "/repos/{owner}/{repo}")
	path = shaSegment.ReplaceAllString(path, "/{sha}$1")
	path = numberSegment.ReplaceAllString(path, "/{n}$1")
	return method + " " + path
}

// diffCounts is after minus before, without the shapes that did not move.
func diffCounts(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// contentGenerating adds up the requests by shape whose method creates
// content (POST, PATCH, PUT, DELETE): what GitHub's secondary rate limits
// count.
func contentGenerating(byShape map[string]float64) float64 {
	var n float64
	for k, v := range byShape {
		method, _, _ := strings.Cut(k, " ")
		switch method {
		case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
			n += v
		}
	}
	return n
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sortedShapes(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// WithAPIURL sets the payload's repository.url, the API URL of the
// repository GitHub puts there, to the stand-in's: Argo CD's webhook
// handler refreshes the generators whose api matches that URL's host.
func WithAPIURL(body []byte, apiURL, repository string) ([]byte, error) {
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	r, ok := p["repository"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("payload has no repository")
	}
	r["url"] = strings.TrimSuffix(apiURL, "/") + "/repos/" + repository
	return json.Marshal(p)
}

// target is one system's webhook endpoint.
type target struct {
	name   string
	url    string
	secret []byte
}

// deliver sends one delivery to every target at once and returns when each
// answered; an answer other than 2xx is an error.
func deliver(ctx context.Context, d githubapi.Delivery, targets []target) error {
	errs := make(chan error, len(targets))
	d = d.Identified()
	for _, t := range targets {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			resp, err := d.Send(cctx, nil, t.url, t.secret)
			if err != nil {
				errs <- fmt.Errorf("%s webhook: %w", t.name, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				errs <- fmt.Errorf("%s webhook answered %s", t.name, resp.Status)
				return
			}
			errs <- nil
		}()
	}
	var first error
	for range targets {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
