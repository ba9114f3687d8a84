package syncer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
)

// syncProcess is what a test needs to run the petri-sync binary as its
// Deployment does: the binary, a namespace for its environments, a
// kubeconfig, the GitHub stand-in, the token and webhook secret files, and
// a config repository on disk with one application (shop, repository
// acme/shop, label preview).
type syncProcess struct {
	dir, binary, namespace, kubeconfig string
	tokenFile, secretFile, configRepo  string
	gh                                 *githubapi.Server
}

// newSyncProcess builds petri-sync and prepares everything it reads; the
// namespace is made as name (with a suffix) and the kubeconfig's user is
// user, of system:masters.
func newSyncProcess(t *testing.T, ctx context.Context, name, user string) *syncProcess {
	t.Helper()
	require.NoError(t, controlplane.RegisterInputs("sync", "cmd/petri-sync"))
	p := &syncProcess{dir: t.TempDir()}
	bins, err := controlplane.Build(filepath.Join(p.dir, "bin"), "./cmd/petri-sync")
	require.NoError(t, err)
	p.binary = bins["petri-sync"]
	p.namespace, err = env.CreateNamespace(ctx, name)
	require.NoError(t, err)
	p.kubeconfig, err = env.WriteKubeconfig(user, "system:masters")
	require.NoError(t, err)

	p.gh = githubapi.New(githubapi.Options{Tokens: []string{"ghp_test"}})
	t.Cleanup(p.gh.Close)
	write := func(name, content string) string {
		path := filepath.Join(p.dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	p.tokenFile = write("token", "ghp_test\n")
	p.secretFile = write("secret", secret+"\n")
	p.configRepo = filepath.Join(p.dir, "config")
	repo, err := git.PlainInitWithOptions(p.configRepo, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	require.NoError(t, err)
	write("config/applications/shop.yaml", `apiVersion: petri.dev/v1alpha1
kind: Application
name: shop
repository: acme/shop
trigger:
  labels: [preview]
components:
  - name: api
    chart:
      repository: /charts/api
      name: api
      version: 1.0.0
`)
	wt, err := repo.Worktree()
	require.NoError(t, err)
	_, err = wt.Add("applications/shop.yaml")
	require.NoError(t, err)
	_, err = wt.Commit("shop", &git.CommitOptions{Author: &object.Signature{Name: "test", Email: "test@example.com", When: wall.Now()}})
	require.NoError(t, err)
	return p
}

// args are the flags every petri-sync process of these tests gets.
func (p *syncProcess) args(listen string) []string {
	return []string{"-namespace", p.namespace, "-config-repo", p.configRepo, "-config-repo-github", "acme/petri-config",
		"-github-api-url", p.gh.URL, "-github-token-file", p.tokenFile, "-webhook-secret-file", p.secretFile,
		"-listen", listen, "-kubeconfig", p.kubeconfig}
}
