package peers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/internal/benchkit"
	"github.com/petri-dev/petri/sync/api"
)

// Petri's namespaces, as config/default names them, and the deployer
// image the local node plays.
const (
	managementNamespace = benchkit.ManagementNamespace
	sharedNamespace     = benchkit.SharedNamespace
	syncNamespace       = "petri-sync"
	DeployerImage       = "petri.dev/deployer:peers"
	// ExampleAppImage is the example chart's image (its values.yaml).
	ExampleAppImage = "petri.dev/example-app"
	// chartCASecret holds the chart repository's certificate for the
	// deployer Jobs.
	chartCASecret = "chart-repository-ca"
)

// petri is Petri's operator and sync as processes of this machine, as
// their ServiceAccounts with config/'s RBAC, admission fences and
// FlowSchemas; the deployer runs as Jobs on the local node.
type petri struct {
	operator, sync *process
	webhookURL     string
}

// installPetri applies what config/default installs apart from the
// Deployments: namespaces, the operator's and sync's ServiceAccounts and
// RBAC, the fences and FlowSchemas, and the ConfigMap petri-operator.
func installPetri(ctx context.Context, c *controlplane.Cluster, root string) error {
	files, err := benchkit.ConfigFiles(root,
		"sync/service_account.yaml",
		"sync/role.yaml",
		"sync/role_binding.yaml",
		"sync/leader_election_role.yaml",
		"sync/logs_role.yaml",
	)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, files...); err != nil {
		return fmt.Errorf("install Petri's namespaces, RBAC, fences and FlowSchemas: %w", err)
	}
	return benchkit.SetDeployerImage(ctx, c, "petri-bench-peers", DeployerImage)
}

// startPetri starts the operator with config/manager's flags and sync with
// config/sync's, against the GitHub API at apiURL and the config
// repository made of the application's file.
func startPetri(ctx context.Context, c *controlplane.Cluster, bins map[string]string, dir string, setup Setup, chartCA []byte, webhookSecret, token string, logf func(string, ...any)) (_ *petri, err error) {
	p := &petri{}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	ports, err := benchkit.FreePorts(4)
	if err != nil {
		return nil, err
	}
	ca := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: managementNamespace, Name: chartCASecret},
		Data:       map[string][]byte{"ca.crt": chartCA},
	}
	if err := c.Client.Patch(ctx, ca, client.Apply, client.FieldOwner("petri-bench-peers"), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("chart repository CA Secret: %w", err)
	}
	kc, err := c.WriteServiceAccountKubeconfig(ctx, managementNamespace, "petri-operator")
	if err != nil {
		return nil, err
	}
	logf("starting Petri: petri-operator, petri-sync")
	p.operator, err = startProcess("petri-operator", bins["petri-operator"], "", []string{
		"--management-namespace=" + managementNamespace,
		"--shared-namespace=" + sharedNamespace,
		"--deployer-image=" + DeployerImage,
		"--chart-ca-secret=" + chartCASecret,
		// A deploy Job's process uses about 70 ms of CPU; at the default
		// request (100m) the node's two cores place 20 at once and the
		// application's pods they wait for find no room.
		"--job-cpu-request=10m",
		"--leader-elect",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		"--zap-encoder=json",
	}, []string{"KUBECONFIG=" + kc, "GOMEMLIMIT=200MiB"}, filepath.Join(dir, "petri-operator.log"), logf)
	if err != nil {
		return nil, err
	}
	if err := p.operator.waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), 90*time.Second); err != nil {
		return nil, err
	}

	secrets := filepath.Join(dir, "petri-sync-secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		return nil, err
	}
	for name, v := range map[string]string{"github-token": token, "webhook-secret": webhookSecret} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	repo := filepath.Join(dir, "config-repo")
	if err := benchkit.CommitFiles(repo, map[string]string{"applications/" + AppName + ".yaml": PetriApplicationYAML(setup)}, "petri-bench-peers", "config"); err != nil {
		return nil, err
	}
	if kc, err = c.WriteServiceAccountKubeconfig(ctx, syncNamespace, "petri-sync"); err != nil {
		return nil, err
	}
	p.sync, err = startProcess("petri-sync", bins["petri-sync"], "", []string{
		"--namespace=" + managementNamespace,
		"--config-repo=" + repo,
		"--config-branch=main",
		"--github-api-url=" + setup.SyncAPIURL,
		"--github-token-file=" + filepath.Join(secrets, "github-token"),
		"--webhook-secret-file=" + filepath.Join(secrets, "webhook-secret"),
		fmt.Sprintf("--listen=127.0.0.1:%d", ports[2]),
		"--leader-election-namespace=" + syncNamespace,
		"--leader-election-id=petri-sync-0",
		"--zap-encoder=json",
	}, []string{"KUBECONFIG=" + kc, "POD_NAME=petri-sync-0", "POD_NAMESPACE=" + syncNamespace}, filepath.Join(dir, "petri-sync.log"), logf)
	if err != nil {
		return nil, err
	}
	if err := p.sync.waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2]), 90*time.Second); err != nil {
		return nil, err
	}
	p.webhookURL = fmt.Sprintf("http://127.0.0.1:%d%s", ports[2], api.WebhookPath)
	return p, nil
}

func (p *petri) stop() {
	for _, proc := range []*process{p.sync, p.operator} {
		if proc != nil {
			proc.stop()
		}
	}
}

func (p *petri) procs() []*process { return []*process{p.operator, p.sync} }
