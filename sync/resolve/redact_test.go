package resolve_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/sync/resolve"
)

// planted stands for a credential written into a chart repository's URL.
const planted = "PLANTED-tok-5c1e"

// echo answers every request with status and a body that repeats what the
// request carried: its Authorization header and its query, as a careless
// or hostile server would.
func echo(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		fmt.Fprintf(w, "denied: Authorization: %s, query %s, planted %s", r.Header.Get("Authorization"), r.URL.RawQuery, planted)
	}
}

// The resolver's errors name the repository without its userinfo or query
// credentials and never quote what the server answered.
func TestResolveErrorsCarryNoCredentials(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusInternalServerError} {
		srv := httptest.NewTLSServer(echo(status))
		t.Cleanup(srv.Close)
		repo := strings.Replace(srv.URL, "https://", "https://ci:"+planted+"@", 1) + "/charts?token=" + planted
		r := &resolve.Resolver{HTTPClient: srv.Client()}
		_, err := r.Resolve(context.Background(), repo, "web", "~1.4")
		require.Error(t, err)
		assert.NotContains(t, err.Error(), planted, "HTTP %d", status)
		assert.NotContains(t, err.Error(), "denied", "the body is not quoted (HTTP %d)", status)
		assert.Contains(t, err.Error(), fmt.Sprintf("HTTP %d", status))
		assert.Contains(t, err.Error(), strings.TrimPrefix(srv.URL, "https://"), "the host is named")
	}
	// A body that is not an index is not quoted either.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "entries: [\n"+planted)
	}))
	t.Cleanup(srv.Close)
	_, err := (&resolve.Resolver{HTTPClient: srv.Client()}).Resolve(context.Background(), srv.URL, "web", "~1.4")
	require.ErrorContains(t, err, "not a valid index.yaml")
	assert.NotContains(t, err.Error(), planted)

	// An OCI reference with userinfo is refused without quoting it.
	_, err = (&resolve.Resolver{}).Resolve(context.Background(), "oci://u:"+planted+"@registry.example/charts", "api", "^1")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), planted)
}

// A redirect to another host, or from https to http, is not followed unless
// the host is allowed; the other host never sees a request.
func TestResolveRefusesRedirectsToOtherHosts(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, index)
	}))
	t.Cleanup(other.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, index)
	}))
	t.Cleanup(plain.Close)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away/index.yaml":
			http.Redirect(w, r, other.URL+"/index.yaml?sig="+planted, http.StatusFound)
		case "/down/index.yaml":
			http.Redirect(w, r, plain.URL+"/index.yaml", http.StatusFound)
		case "/here/index.yaml":
			http.Redirect(w, r, "/index.yaml", http.StatusFound)
		default:
			_, _ = io.WriteString(w, index)
		}
	}))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	r := &resolve.Resolver{HTTPClient: srv.Client()}

	_, err := r.Resolve(ctx, srv.URL+"/away", "web", "~1.4")
	require.ErrorIs(t, err, resolve.ErrHostNotAllowed)
	assert.NotContains(t, err.Error(), planted)
	_, err = r.Resolve(ctx, srv.URL+"/down", "web", "~1.4")
	require.ErrorIs(t, err, resolve.ErrHostNotAllowed)
	assert.Zero(t, hits.Load(), "no request reached another host")

	got, err := r.Resolve(ctx, srv.URL+"/here", "web", "~1.4")
	require.NoError(t, err, "a redirect on the repository's own host is followed")
	assert.Equal(t, "1.4.10", got)

	allowed := &resolve.Resolver{HTTPClient: srv.Client(), AllowedHosts: []string{strings.TrimPrefix(other.URL, "https://")}}
	got, err = allowed.Resolve(ctx, srv.URL+"/away", "web", "~1.4")
	require.NoError(t, err, "an allowed host is followed")
	assert.Equal(t, "1.4.10", got)
	assert.Equal(t, int32(1), hits.Load())
}

// A registry's token realm on another host is not asked for a token unless
// the host is allowed; nothing the registry or the realm said is quoted.
func TestResolveRefusesTokenRealmsOnOtherHosts(t *testing.T) {
	t.Parallel()
	var realmHits atomic.Int32
	realm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		realmHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"token":"t"}`)
	}))
	t.Cleanup(realm.Close)
	// By name: go-containerregistry itself refuses a realm at a private
	// address literal, not one a name resolves to.
	realmURL := strings.Replace(realm.URL, "127.0.0.1", "localhost", 1)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="reg"`, realmURL))
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"errors":[{"code":"UNAUTHORIZED","message":"%s"}]}`, planted)
			return
		}
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"errors":[{"code":"DENIED","message":"you sent %s"}]}`, r.Header.Get("Authorization")+" "+planted)
	}))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	ctx := context.Background()

	_, err := (&resolve.Resolver{PlainHTTP: true}).Resolve(ctx, "oci://"+host+"/charts", "api", "^1")
	require.ErrorIs(t, err, resolve.ErrHostNotAllowed)
	assert.Zero(t, realmHits.Load(), "the realm was not asked")
	assert.NotContains(t, err.Error(), planted)

	allowed := &resolve.Resolver{PlainHTTP: true, AllowedHosts: []string{strings.TrimPrefix(realmURL, "http://")}}
	_, err = allowed.Resolve(ctx, "oci://"+host+"/charts", "api", "^1")
	require.Error(t, err)
	assert.Equal(t, int32(1), realmHits.Load(), "an allowed realm is asked")
	assert.Contains(t, err.Error(), "HTTP 403")
	assert.NotContains(t, err.Error(), planted, "the registry's answer is not quoted")
	assert.NotContains(t, err.Error(), "DENIED")
}

// An index larger than MaxIndexBytes is refused, not read.
func TestResolveRefusesHugeIndexes(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "entries:\n")
		chunk := strings.Repeat("#", 1<<20)
		for range resolve.MaxIndexBytes>>20 + 1 {
			if _, err := io.WriteString(w, chunk+"\n"); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	_, err := (&resolve.Resolver{HTTPClient: srv.Client()}).Resolve(context.Background(), srv.URL, "web", "~1")
	require.ErrorContains(t, err, "larger than 16 MiB")
}

// A repository URL's query (a token) is kept when index.yaml is asked for
// beside its path.
func TestResolveKeepsTheRepositoryQuery(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/charts/index.yaml" || r.URL.Query().Get("token") != planted {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, index)
	}))
	t.Cleanup(srv.Close)
	got, err := (&resolve.Resolver{HTTPClient: srv.Client()}).Resolve(context.Background(), srv.URL+"/charts/?token="+planted, "web", "~1.4")
	require.NoError(t, err)
	assert.Equal(t, "1.4.10", got)
}
