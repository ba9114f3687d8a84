package deployer

import (
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// StorageDriver is where Helm keeps release records: Secrets in the release's
// namespace, so a release lives and dies with its environment's namespace and
// the deployer needs no rights outside it.
const StorageDriver = "secret"

// NewRESTClientGetter returns the Kubernetes client loader for a namespace.
// With an empty kubeconfig it follows the standard loading rules (the
// KUBECONFIG environment variable, else the in-cluster ServiceAccount), which
// is what a Job's pod has and also what the local node gives its processes;
// tests pass a kubeconfig path to act as a chosen user. Its discovery is
// kept in memory (see restClientGetter).
func NewRESTClientGetter(kubeconfig, namespace string) genericclioptions.RESTClientGetter {
	flags := genericclioptions.NewConfigFlags(true)
	flags.Namespace = &namespace
	if kubeconfig != "" {
		flags.KubeConfig = &kubeconfig
	}
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		// One release is a handful of requests; client-go's default of 5 QPS
		// would make the Helm wait loop and large charts crawl.
		c.QPS, c.Burst = 50, 100
		return c
	}
	return &restClientGetter{ConfigFlags: flags}
}

// restClientGetter is the client loader of ConfigFlags with its discovery
// in memory. ConfigFlags keeps discovery on disk, for the next process to
// reuse; a deploy Job's temporary directory is new in every pod, and Helm
// invalidates discovery before each action anyway, so the disk cache was
// only written: every discovery document encoded and written twice (HTTP
// and parsed), several milliseconds of each Job's CPU. One discovery of a
// process (/version, then /api and /apis, aggregated) serves both Helm's
// capabilities and the REST mapper.
type restClientGetter struct {
	*genericclioptions.ConfigFlags

	once      sync.Once
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
	err       error
}

func (g *restClientGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	g.once.Do(func() {
		cfg, err := g.ToRESTConfig()
		if err != nil {
			g.err = err
			return
		}
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			g.err = err
			return
		}
		g.discovery = memory.NewMemCacheClient(dc)
		g.mapper = restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(g.discovery), g.discovery, func(string) {})
	})
	return g.discovery, g.err
}

func (g *restClientGetter) ToRESTMapper() (meta.RESTMapper, error) {
	if _, err := g.ToDiscoveryClient(); err != nil {
		return nil, err
	}
	return g.mapper, nil
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
