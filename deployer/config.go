package deployer

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// StorageDriver is where Helm keeps release records: Secrets in the release's
// namespace, so a release lives and dies with its environment's namespace and
// the deployer needs no rights outside it.
const StorageDriver = "secret"

// NewRESTClientGetter returns the Kubernetes client loader for a namespace.
// With an empty kubeconfig it follows the standard loading rules (the
// KUBECONFIG environment variable, else the in-cluster ServiceAccount), which
// is what a Job's pod has and also what the local node gives its processes;
// tests pass a kubeconfig path to act as a chosen user.
func NewRESTClientGetter(kubeconfig, namespace string) genericclioptions.RESTClientGetter {
	flags := genericclioptions.NewConfigFlags(true)
	flags.Namespace = &namespace
	if kubeconfig != "" {
		flags.KubeConfig = &kubeconfig
	}
	// A pod's HOME is often read-only; keep the discovery cache in the
	// temporary directory, which the Job mounts as an emptyDir.
	cacheDir := filepath.Join(os.TempDir(), "petri-deployer-kube-cache")
	flags.CacheDir = &cacheDir
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		// One release is a handful of requests; client-go's default of 5 QPS
		// would make the Helm wait loop and large charts crawl.
		c.QPS, c.Burst = 50, 100
		return c
	}
	return flags
}

// NewActionConfig is the one place that builds Helm's action.Configuration:
// the given client loader, the Secrets storage driver in namespace, and a kube
// client pinned to namespace so the chart's objects land there whatever the
// kubeconfig's current context says. Helm's debug output goes to log at V(1).
func NewActionConfig(getter genericclioptions.RESTClientGetter, namespace string, log logr.Logger) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, namespace, StorageDriver, helmDebugLog(log)); err != nil {
		return nil, fmt.Errorf("initialise helm for namespace %s: %w", namespace, err)
	}
	if kc, ok := cfg.KubeClient.(*kube.Client); ok {
		kc.Namespace = namespace
	}
	return cfg, nil
}

// helmDebugLog writes Helm's debug output to log at V(1).
func helmDebugLog(log logr.Logger) action.DebugLog {
	return func(format string, v ...any) {
		log.V(1).Info(fmt.Sprintf(format, v...), "source", "helm")
	}
}
