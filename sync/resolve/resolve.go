// Package resolve turns chart version constraints (~1.4, ^2) into exact
// versions, from an https chart repository's index.yaml or an OCI registry's
// tags, so that the operator only ever sees exact references.
package resolve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"sigs.k8s.io/yaml"

	"github.com/petri-dev/petri/internal/redact"
	"github.com/petri-dev/petri/sync/config"
)

// DefaultTimeout is how long one fetch of an index or a tag list may take.
const DefaultTimeout = 30 * time.Second

// Resolver resolves and caches. It is safe for concurrent use.
type Resolver struct {
	// HTTPClient fetches index.yaml files and talks to registries.
	HTTPClient *http.Client
	// TTL is how long a fetched list of versions is trusted; a minute when
	// zero. When a refresh fails, the last list is used and the failure is
	// returned only if there is none.
	TTL time.Duration
	// PlainHTTP talks to OCI registries over http (tests, local registries).
	PlainHTTP bool
	// Timeout bounds one fetch of an index or a tag list, whatever the
	// caller's context allows, so that a repository that never answers
	// cannot hold up the config load or a reconcile; DefaultTimeout when
	// zero.
	Timeout time.Duration
	// AllowedHosts are the hosts, besides a repository's own, that its
	// look-ups may reach: where an index's redirect or a registry's token
	// realm points (host, host:port or *.domain). Any other is refused, and
	// so is a redirect from https to http.
	AllowedHosts []string

	mu    sync.Mutex
	lists map[string]*versionList
	now   func() time.Time
	// Fetches counts index and tag-list fetches, for tests.
	Fetches int
}

type versionList struct {
	fetched  time.Time
	versions []*semver.Version
	raw      map[*semver.Version]string
	err      error
	loading  chan struct{}
}

// Resolve returns the exact version for a chart reference. Exact versions
// are returned unchanged without any network access.
func (r *Resolver) Resolve(ctx context.Context, repository, chart, version string) (string, error) {
	if config.IsExactVersion(version) {
		return version, nil
	}
	c, err := semver.NewConstraint(version)
	if err != nil {
		return "", fmt.Errorf("chart %s version %q: %w", chart, version, err)
	}
	list, err := r.list(ctx, repository, chart)
	if err != nil {
		// The messages name the repository without its credentials; a
		// library's text may still quote them in another form.
		return "", redact.Error(err, redact.SecretsOf(repository)...)
	}
	for _, v := range list.versions { // newest first
		if c.Check(v) {
			return list.raw[v], nil
		}
	}
	return "", fmt.Errorf("no version of chart %s in %s satisfies %s", chart, redact.URL(repository), version)
}

func (r *Resolver) list(ctx context.Context, repository, chart string) (*versionList, error) {
	key := repository + "|" + chart
	ttl := r.TTL
	if ttl == 0 {
		ttl = time.Minute
	}
	now := clock.RealClock{}.Now
	if r.now != nil {
		now = r.now
	}
	r.mu.Lock()
	if r.lists == nil {
		r.lists = map[string]*versionList{}
	}
	old := r.lists[key]
	if old != nil && old.loading != nil {
		ch := old.loading
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return r.list(ctx, repository, chart)
	}
	if old != nil && old.err == nil && now().Sub(old.fetched) < ttl {
		r.mu.Unlock()
		return old, nil
	}
	loading := &versionList{loading: make(chan struct{})}
	r.lists[key] = loading
	r.Fetches++
	r.mu.Unlock()

	raw, err := r.fetch(ctx, repository, chart)
	fresh := &versionList{fetched: now(), raw: map[*semver.Version]string{}, err: err}
	for _, s := range raw {
		v, perr := semver.NewVersion(strings.ReplaceAll(s, "_", "+"))
		if perr != nil {
			continue
		}
		fresh.versions = append(fresh.versions, v)
		fresh.raw[v] = strings.ReplaceAll(s, "_", "+")
	}
	sort.Sort(sort.Reverse(semver.Collection(fresh.versions)))

	r.mu.Lock()
	defer r.mu.Unlock()
	close(loading.loading)
	switch {
	case err == nil:
		r.lists[key] = fresh
		return fresh, nil
	case old != nil && old.err == nil:
		// Keep serving the last good list; try again after the TTL.
		old.fetched = now().Add(-ttl / 2)
		r.lists[key] = old
		return old, nil
	default:
		delete(r.lists, key)
		return nil, err
	}
}

func (r *Resolver) fetch(ctx context.Context, repository, chart string) ([]string, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var versions []string
	var err error
	switch {
	case strings.HasPrefix(repository, "https://"), strings.HasPrefix(repository, "http://"):
		versions, err = r.fetchIndex(fctx, repository, chart)
	case strings.HasPrefix(repository, "oci://"):
		versions, err = r.fetchTags(fctx, repository, chart)
	default:
		return nil, fmt.Errorf("chart %s: a version constraint needs an https:// or oci:// repository, not %s", chart, redact.URL(repository))
	}
	if err != nil && ctx.Err() == nil && errors.Is(fctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w (no answer within %s)", err, timeout)
	}
	return versions, err
}

type index struct {
	Entries map[string][]struct {
		Version string `json:"version"`
	} `json:"entries"`
}

// MaxIndexBytes bounds a chart repository's index.yaml. The index is
// converted to JSON in memory, which takes several times its size; a real
// repository's index is far smaller (one that keeps every version of many
// charts for years may not be: serve its charts from an OCI registry, whose
// tag list is per chart).
const MaxIndexBytes = 16 << 20

// ErrHostNotAllowed marks a request the resolver refused to send: a
// redirect or an OCI token realm to a host other than the repository's, or
// from https to http, that AllowedHosts does not name.
var ErrHostNotAllowed = errors.New("host not allowed for chart look-ups")

func (r *Resolver) base() *http.Client {
	if r.HTTPClient != nil {
		return r.HTTPClient
	}
	return http.DefaultClient
}

// client is the base client with every request, redirects and token
// realms included, kept to the repository's host (guard).
func (r *Resolver) client(origin *url.URL) *http.Client {
	b := r.base()
	next := b.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	return &http.Client{Transport: &guard{next: next, origin: origin, allowed: r.AllowedHosts}, CheckRedirect: b.CheckRedirect, Timeout: b.Timeout}
}

// guard refuses requests to another host than the repository's, or over
// http when the repository is https, unless the host is allowed: a chart
// repository's redirect or a registry's WWW-Authenticate realm must not
// make sync send requests (with its credentials, from its network
// position) anywhere the config's author or the registry chooses.
type guard struct {
	next    http.RoundTripper
	origin  *url.URL
	allowed []string
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	u := req.URL
	same := strings.EqualFold(u.Host, g.origin.Host) && (u.Scheme == g.origin.Scheme || g.origin.Scheme == "http")
	if !same && !hostAllowed(u, g.allowed) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		what := "host " + u.Hostname()
		if strings.EqualFold(u.Host, g.origin.Host) {
			what = "http instead of https"
		}
		return nil, fmt.Errorf("%w: %s is not the repository's %s (allow it with -chart-allowed-hosts)", ErrHostNotAllowed, what, g.origin.Host)
	}
	return g.next.RoundTrip(req)
}

// hostAllowed reports whether u's host is named in allowed: as host, as
// host:port, or under a "*.domain" entry.
func hostAllowed(u *url.URL, allowed []string) bool {
	host := strings.ToLower(u.Hostname())
	for _, a := range allowed {
		a = strings.ToLower(strings.TrimSpace(a))
		switch {
		case a == "":
		case strings.EqualFold(a, u.Host), a == host:
			return true
		case strings.HasPrefix(a, "*.") && strings.HasSuffix(host, a[1:]):
			return true
		}
	}
	return false
}

// answered is the message for a repository's or registry's non-success
// answer: a fixed sentence and the status code. What the remote sent (a
// body that may echo the request's Authorization header, or any text its
// operator chooses) is never quoted: the message reaches pull requests.
func answered(code int) string {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Sprintf("the server refused the request (HTTP %d): credentials missing or not accepted", code)
	case http.StatusNotFound:
		return fmt.Sprintf("not found (HTTP %d)", code)
	case http.StatusTooManyRequests:
		return fmt.Sprintf("rate limited (HTTP %d)", code)
	}
	return fmt.Sprintf("the server answered HTTP %d", code)
}

func (r *Resolver) fetchIndex(ctx context.Context, repository, chart string) ([]string, error) {
	origin, err := url.Parse(repository)
	if err != nil {
		return nil, fmt.Errorf("chart repository %s: not a valid URL", redact.URL(repository))
	}
	// index.yaml beside the repository's path; a query (a token) stays.
	origin.Path = strings.TrimSuffix(origin.Path, "/") + "/index.yaml"
	origin.RawPath = ""
	u := origin.String()
	where := redact.URL(u)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("chart repository index %s: not a valid URL", where)
	}
	resp, err := r.client(origin).Do(req)
	if err != nil {
		return nil, fmt.Errorf("chart repository index %s: %w", where, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("chart repository index %s: %s", where, answered(resp.StatusCode))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxIndexBytes+1))
	if err != nil {
		return nil, fmt.Errorf("chart repository index %s: %w", where, err)
	}
	if len(data) > MaxIndexBytes {
		return nil, fmt.Errorf("chart repository index %s: larger than %d MiB", where, MaxIndexBytes>>20)
	}
	var idx index
	if err := yaml.Unmarshal(data, &idx); err != nil {
		// The parser quotes the document; its text is the remote's.
		return nil, fmt.Errorf("chart repository index %s: not a valid index.yaml", where)
	}
	entries, ok := idx.Entries[chart]
	if !ok {
		return nil, fmt.Errorf("chart %s is not in the index of %s", chart, redact.URL(repository))
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Version)
	}
	return out, nil
}

func (r *Resolver) fetchTags(ctx context.Context, repository, chart string) ([]string, error) {
	ref := strings.TrimSuffix(strings.TrimPrefix(repository, "oci://"), "/") + "/" + chart
	where := "oci://" + redact.URL(ref)
	var opts []name.Option
	if r.PlainHTTP {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(ref, opts...)
	if err != nil {
		// The parser quotes the reference, userinfo and all.
		return nil, fmt.Errorf("oci repository %s: not a valid reference", where)
	}
	scheme := "https"
	if repo.Scheme() == "http" {
		scheme = "http"
	}
	origin := &url.URL{Scheme: scheme, Host: repo.RegistryStr()}
	tags, err := remote.List(repo, remote.WithContext(ctx), remote.WithTransport(r.client(origin).Transport))
	if err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) {
			return nil, fmt.Errorf("tags of %s: %s", where, answered(terr.StatusCode))
		}
		return nil, fmt.Errorf("tags of %s: %w", where, err)
	}
	return tags, nil
}
