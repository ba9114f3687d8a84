package resolve_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/resolve"
)

const index = `apiVersion: v1
entries:
  web:
    - {name: web, version: 1.4.0}
    - {name: web, version: 1.4.10}
    - {name: web, version: 1.4.2}
    - {name: web, version: 1.5.0}
    - {name: web, version: 1.4.11-rc.1}
    - {name: web, version: not-semver}
`

func TestResolveFromIndex(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	var fail atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if fail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, index)
	}))
	defer srv.Close()
	r := &resolve.Resolver{HTTPClient: srv.Client(), TTL: time.Hour}
	ctx := context.Background()
	tests := []struct{ constraint, want, err string }{
		{"~1.4", "1.4.10", ""},
		{"^1", "1.5.0", ""},
		{">=1.4.0 <1.4.5", "1.4.2", ""},
		{"~1.4.11-0", "1.4.11-rc.1", ""},
		{"1.4.2", "1.4.2", ""},
		{"~2", "", "no version of chart web"},
	}
	for _, tt := range tests {
		got, err := r.Resolve(ctx, srv.URL, "web", tt.constraint)
		if tt.err != "" {
			assert.ErrorContains(t, err, tt.err, tt.constraint)
			continue
		}
		require.NoError(t, err, tt.constraint)
		assert.Equal(t, tt.want, got, tt.constraint)
	}
	assert.Equal(t, int32(1), hits.Load(), "the index is fetched once within the TTL; exact versions need no fetch")

	_, err := r.Resolve(ctx, srv.URL, "db", "~1")
	assert.ErrorContains(t, err, "chart db is not in the index")

	// A repository that fails after a good fetch keeps serving the last list.
	stale := &resolve.Resolver{HTTPClient: srv.Client(), TTL: time.Nanosecond}
	_, err = stale.Resolve(ctx, srv.URL, "web", "~1.4")
	require.NoError(t, err)
	fail.Store(true)
	got, err := stale.Resolve(ctx, srv.URL, "web", "~1.4")
	require.NoError(t, err)
	assert.Equal(t, "1.4.10", got)
	fresh := &resolve.Resolver{HTTPClient: srv.Client()}
	_, err = fresh.Resolve(ctx, srv.URL, "web", "~1.4")
	assert.ErrorContains(t, err, "HTTP 500")
}

func TestResolveFromOCITags(t *testing.T) {
	t.Parallel()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	for _, tag := range []string{"0.9.0", "0.9.1", "1.0.0", "1.0.1_build.5", "latest"} {
		img, err := random.Image(32, 1)
		require.NoError(t, err)
		ref, err := name.ParseReference(host+"/charts/api:"+tag, name.Insecure)
		require.NoError(t, err)
		require.NoError(t, remote.Write(ref, img))
	}
	r := &resolve.Resolver{PlainHTTP: true}
	ctx := context.Background()
	got, err := r.Resolve(ctx, "oci://"+host+"/charts", "api", "^0.9")
	require.NoError(t, err)
	assert.Equal(t, "0.9.1", got)
	got, err = r.Resolve(ctx, "oci://"+host+"/charts/", "api", "~1.0")
	require.NoError(t, err)
	assert.Equal(t, "1.0.1+build.5", got, "Helm writes + as _ in OCI tags")
	_, err = r.Resolve(ctx, "oci://"+host+"/charts", "nope", "^1")
	assert.Error(t, err)
	_, err = r.Resolve(ctx, "/charts/api", "api", "^1")
	assert.ErrorContains(t, err, "needs an https:// or oci:// repository")
}

// A chart repository that never answers costs one resolution at most the
// resolver's timeout, even when the caller's context has no deadline; the
// error says so.
func TestResolveFromRepositoryThatNeverAnswers(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stuck) }) // first: the handler returns, Close does not wait
	r := &resolve.Resolver{HTTPClient: srv.Client(), Timeout: 200 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := r.Resolve(context.Background(), srv.URL, "web", "~1.4")
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no answer within 200ms")
	case <-time.After(10 * time.Second):
		t.Fatal("Resolve is still waiting for a chart repository that never answers")
	}
}
