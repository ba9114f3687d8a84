package configrepo_test

import (
	"context"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/configrepo"
)

// wall is the real clock, read by name where a test needs the time.
var wall = clock.RealClock{}

func commit(t *testing.T, dir string, repo *git.Repository, files map[string]string) string {
	t.Helper()
	wt, err := repo.Worktree()
	require.NoError(t, err)
	for p, c := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644))
		_, err := wt.Add(p)
		require.NoError(t, err)
	}
	h, err := wt.Commit("change", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.com", When: wall.Now()}})
	require.NoError(t, err)
	return h.String()
}

func initRepo(t *testing.T, dir string) *git.Repository {
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	require.NoError(t, err)
	return repo
}

func TestLocalPathFollowsNewCommits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := initRepo(t, dir)
	first := commit(t, dir, repo, map[string]string{"config/apps/a.yaml": "kind: Application\n", "config/README.md": "x", "other/b.yaml": "x: 1\n"})
	r, err := configrepo.New(configrepo.Options{URL: dir, Dir: "config"})
	require.NoError(t, err)
	snap, err := r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, first, snap.Revision)
	assert.Equal(t, map[string][]byte{"config/apps/a.yaml": []byte("kind: Application\n")}, snap.Files, "only YAML files under the directory")

	second := commit(t, dir, repo, map[string]string{"config/apps/c.yml": "kind: SharedWorkload\n"})
	snap, err = r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, second, snap.Revision)
	assert.Len(t, snap.Files, 2)

	missing, err := configrepo.New(configrepo.Options{URL: dir, Branch: "nope"})
	require.NoError(t, err)
	_, err = missing.Fetch(context.Background())
	assert.Error(t, err)
}

// TestFetchHoldsOneCommit: a repository whose history is far larger than its
// head (a config directory inside a busy monorepo) costs one commit's
// objects per change of the head and nothing while the head stays; no
// object store is left behind.
func TestFetchHoldsOneCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	repo := initRepo(t, dir)
	const blob = 1 << 20
	random := func() string {
		b := make([]byte, blob)
		_, _ = rand.Read(b)
		return string(b)
	}
	for i := range 12 {
		// Each commit replaces the monorepo's large file: 12 MiB of
		// history that cannot be compressed, 1 MiB of it at the head.
		commit(t, dir, repo, map[string]string{"assets/data.bin": random(), "config/apps/a.yaml": fmt.Sprintf("kind: Application # %d\n", i)})
	}
	work := t.TempDir()
	r, err := configrepo.New(configrepo.Options{URL: "file://" + dir, Dir: "config", WorkDir: work})
	require.NoError(t, err)
	snap, err := r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "kind: Application # 11\n", string(snap.Files["config/apps/a.yaml"]))
	assert.Less(t, r.FetchedBytes(), int64(2*blob), "the head commit only, not 12 MiB of history")
	assert.Greater(t, r.FetchedBytes(), int64(blob/2), "the head's objects were fetched")
	left, err := os.ReadDir(work)
	require.NoError(t, err)
	assert.Empty(t, left, "the fetch's object store is removed")

	again, err := r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Zero(t, r.FetchedBytes(), "an unchanged head fetches no objects")
	assert.Equal(t, snap.Revision, again.Revision)

	next := commit(t, dir, repo, map[string]string{"config/apps/b.yaml": "kind: Application\n"})
	snap, err = r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, next, snap.Revision)
	assert.Len(t, snap.Files, 2)
	assert.Less(t, r.FetchedBytes(), int64(2*blob), "a new head is one commit's objects again")
}

// TestHTTPSWithToken serves the repository with git's own smart HTTP
// backend behind TLS and basic authentication, as a Git host would.
func TestHTTPSWithToken(t *testing.T) {
	t.Parallel()
	backend, err := exec.LookPath("git")
	require.NoError(t, err)
	root := t.TempDir()
	dir := filepath.Join(root, "config.git")
	repo := initRepo(t, dir)
	rev := commit(t, dir, repo, map[string]string{"apps/a.yaml": "kind: Application\n"})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "x-access-token" || p != "t0ken" {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h := &cgi.Handler{Path: backend, Args: []string{"http-backend"}, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("t0ken\n"), 0o600))
	r, err := configrepo.New(configrepo.Options{URL: srv.URL + "/config.git", TokenFile: tokenFile, CABundle: ca})
	require.NoError(t, err)
	snap, err := r.Fetch(context.Background())
	require.NoError(t, err)
	assert.Equal(t, rev, snap.Revision)
	assert.Contains(t, snap.Files, "apps/a.yaml")

	require.NoError(t, os.WriteFile(tokenFile, []byte("wrong\n"), 0o600))
	bad, err := configrepo.New(configrepo.Options{URL: srv.URL + "/config.git", TokenFile: tokenFile, CABundle: ca})
	require.NoError(t, err)
	_, err = bad.Fetch(context.Background())
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "wrong", "the token never appears in errors")
}

// A git server that accepts the connection and then never answers (a
// stalled server or proxy) costs one Fetch its timeout, not config updates
// for good: Fetch returns with an error that says so, though the caller's
// context has no deadline.
func TestFetchOfAStalledServerEndsAtItsTimeout(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				// Read the request, answer nothing, keep the connection.
				_, _ = io.Copy(io.Discard, c)
				<-done
				c.Close()
			}()
		}
	}()
	r, err := configrepo.New(configrepo.Options{URL: "http://" + l.Addr().String() + "/config.git", Timeout: 2 * time.Second})
	require.NoError(t, err)
	start := wall.Now()
	fetched := make(chan error, 1)
	go func() {
		_, err := r.Fetch(context.Background())
		fetched <- err
	}()
	select {
	case err := <-fetched:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "did not answer within 2s")
		assert.Less(t, wall.Since(start), 10*time.Second)
	case <-time.After(time.Minute):
		require.FailNow(t, "Fetch of a stalled server did not return")
	}
}
