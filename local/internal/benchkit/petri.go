package benchkit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
)

// Petri's namespaces, as config/default names them: both benchmarks run
// the operator as its ServiceAccount there, under config/'s RBAC.
const (
	ManagementNamespace = "petri-system"
	SharedNamespace     = "petri-shared"
)

// ConfigFiles are the manifests of config/ under root that config/default
// installs apart from the Deployments (a benchmark starts the programs
// itself): the namespaces, the operator's ServiceAccount and RBAC, then
// more (paths under config/, such as sync's RBAC), then the admission
// fences and the FlowSchemas.
func ConfigFiles(root string, more ...string) ([]string, error) {
	cfg := filepath.Join(root, "config")
	files := []string{
		filepath.Join(cfg, "default", "namespaces.yaml"),
		filepath.Join(cfg, "rbac", "service_account.yaml"),
		filepath.Join(cfg, "rbac", "generated", "role.yaml"),
		filepath.Join(cfg, "rbac", "cluster_role_binding.yaml"),
		filepath.Join(cfg, "rbac", "role_binding.yaml"),
	}
	for _, f := range more {
		files = append(files, filepath.Join(cfg, f))
	}
	for _, dir := range []string{"fences", "flowcontrol"} {
		found, err := filepath.Glob(filepath.Join(cfg, dir, "*.yaml"))
		if err != nil {
			return nil, err
		}
		for _, f := range found {
			if filepath.Base(f) != "kustomization.yaml" {
				files = append(files, f)
			}
		}
	}
	return files, nil
}

// SetDeployerImage writes the ConfigMap petri-operator that the operator
// and the fences share, with image as the deployer image, applied as
// owner.
func SetDeployerImage(ctx context.Context, c *controlplane.Cluster, owner, image string) error {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ManagementNamespace, Name: "petri-operator"},
		Data:       map[string]string{"deployer-image": image, "step-images": "", "shared-namespace": SharedNamespace},
	}
	if err := c.Client.Patch(ctx, cm, client.Apply, client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("set deployer-image in ConfigMap petri-operator: %w", err)
	}
	return nil
}

// ImageName strips the tag from an image reference: the local node plays
// an image by its name.
func ImageName(image string) string {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i]
	}
	return image
}

// CommitFiles makes a git repository in dir with one commit of files (path
// to content), by author with message: the config repository sync reads.
func CommitFiles(dir string, files map[string]string, author, message string) error {
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		return err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return err
	}
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return err
		}
		if _, err := wt.Add(p); err != nil {
			return err
		}
	}
	_, err = wt.Commit(message, &git.CommitOptions{Author: &object.Signature{Name: author, Email: "bench@localhost", When: time.Now()}})
	return err
}
