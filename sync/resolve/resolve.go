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
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

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
		return "", err
	}
	for _, v := range list.versions { // newest first
		if c.Check(v) {
			return list.raw[v], nil
		}
	}
	return "", fmt.Errorf("no version of chart %s in %s satisfies %s", chart, repository, version)
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
		return nil, fmt.Errorf("chart %s: a version constraint needs an https:// or oci:// repository, not %s", chart, repository)
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

func (r *Resolver) client() *http.Client {
	if r.HTTPClient != nil {
		return r.HTTPClient
	}
	return http.DefaultClient
}

func (r *Resolver) fetchIndex(ctx context.Context, repository, chart string) ([]string, error) {
	u := strings.TrimSuffix(repository, "/") + "/index.yaml"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("chart repository index %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("chart repository index %s: HTTP %d", u, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("chart repository index %s: %w", u, err)
	}
	var idx index
	if err := yaml.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("chart repository index %s: %w", u, err)
	}
	entries, ok := idx.Entries[chart]
	if !ok {
		return nil, fmt.Errorf("chart %s is not in the index of %s", chart, repository)
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Version)
	}
	return out, nil
}

func (r *Resolver) fetchTags(ctx context.Context, repository, chart string) ([]string, error) {
	ref := strings.TrimSuffix(strings.TrimPrefix(repository, "oci://"), "/") + "/" + chart
	var opts []name.Option
	if r.PlainHTTP {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("oci repository %s: %w", ref, err)
	}
	tags, err := remote.List(repo, remote.WithContext(ctx), remote.WithTransport(r.transport()))
	if err != nil {
		return nil, fmt.Errorf("tags of oci://%s: %w", ref, err)
	}
	return tags, nil
}

func (r *Resolver) transport() http.RoundTripper {
	if t := r.client().Transport; t != nil {
		return t
	}
	return http.DefaultTransport
}
