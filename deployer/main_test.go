package deployer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/deployer"
	"github.com/petri-dev/petri/local/controlplane"
)

var (
	env *controlplane.Cluster
	// charts is examples/charts in the repository.
	charts string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	charts = filepath.Join(root, "examples", "charts")
	env, err = controlplane.Start(controlplane.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	return m.Run()
}

func namespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := env.CreateNamespace(context.Background(), strings.Trim(name, "-"))
	require.NoError(t, err)
	return ns
}

// testContext carries a logger that writes to the test's log.
func testContext(t *testing.T) context.Context {
	return logr.NewContext(context.Background(), testr.New(t))
}

func testLogger(t *testing.T) logr.Logger { return testr.New(t) }

// newDeployer acts as the cluster administrator in ns.
func newDeployer(t testing.TB, ns string) *deployer.Deployer {
	t.Helper()
	d, err := deployer.New(deployer.NewRESTClientGetter(env.Kubeconfig, ns), ns, logr.Discard())
	require.NoError(t, err)
	return d
}

// actionConfig is Helm's own view of ns, for reading and planting release
// records the way Helm writes them.
func actionConfig(t testing.TB, ns string) *action.Configuration {
	t.Helper()
	cfg, err := deployer.NewActionConfig(deployer.NewRESTClientGetter(env.Kubeconfig, ns), ns, logr.Discard())
	require.NoError(t, err)
	return cfg
}

// localChart loads an example chart through the path loader.
func localChart(t testing.TB, name string) *chart.Chart {
	t.Helper()
	ch, err := deployer.LoadChart(context.Background(), deployer.ChartSource{Repository: charts, Name: name, Version: "0.1.0"})
	require.NoError(t, err)
	return ch
}

func configMapData(ctx context.Context, ns, name string) map[string]string {
	var cm corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		return nil
	}
	return cm.Data
}

// writeKubeconfig turns a rest.Config with a bearer token into a kubeconfig
// file, since the deployer only takes Kubernetes credentials that way.
func writeKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}
