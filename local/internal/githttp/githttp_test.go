package githttp_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/internal/githttp"
)

func commit(t *testing.T, dir, file, text string) plumbing.Hash {
	t.Helper()
	repo, err := git.PlainOpen(dir)
	require.NoError(t, err)
	wt, err := repo.Worktree()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644))
	_, err = wt.Add(file)
	require.NoError(t, err)
	h, err := wt.Commit("change "+file, &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@localhost", When: time.Unix(1700000000, 0)}})
	require.NoError(t, err)
	return h
}

// A shallow clone over HTTP sees the source's head, and a later shallow
// fetch sees the commit made since; a push is refused.
func TestCloneAndFetchOverSmartHTTP(t *testing.T) {
	src := t.TempDir()
	_, err := git.PlainInitWithOptions(src, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	require.NoError(t, err)
	first := commit(t, src, "a.yaml", "a: 1\n")
	h, err := githttp.Handler(map[string]string{"/config.git": src})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	dst := t.TempDir()
	clone, err := git.PlainClone(dst, false, &git.CloneOptions{URL: srv.URL + "/config.git", Depth: 1, ReferenceName: plumbing.Main, SingleBranch: true})
	require.NoError(t, err)
	head, err := clone.Head()
	require.NoError(t, err)
	require.Equal(t, first, head.Hash())

	second := commit(t, src, "b.yaml", "b: 2\n")
	err = clone.Fetch(&git.FetchOptions{Depth: 1, Force: true, Tags: git.NoTags})
	require.NoError(t, err)
	ref, err := clone.Reference(plumbing.NewRemoteReferenceName("origin", "main"), true)
	require.NoError(t, err)
	require.Equal(t, second, ref.Hash())
	_, err = clone.CommitObject(second)
	require.NoError(t, err, "the fetched commit's objects are there")

	require.ErrorIs(t, clone.Fetch(&git.FetchOptions{Depth: 1, Tags: git.NoTags}), git.NoErrAlreadyUpToDate)

	resp, err := http.Get(srv.URL + "/config.git/info/refs?service=git-receive-pack")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, err = http.Get(srv.URL + "/other.git/info/refs?service=git-upload-pack")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
