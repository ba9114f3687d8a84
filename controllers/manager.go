package controllers

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/options"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
	"github.com/petri-dev/petri/controllers/internal/route"
	"github.com/petri-dev/petri/controllers/internal/shared"
	"github.com/petri-dev/petri/controllers/sharedworkload"
	"github.com/petri-dev/petri/controllers/workloadcluster"
)

// Options are the operator's settings (options.Options); cmd/petri-operator
// fills them from flags and tests use the same defaults.
type Options = options.Options

// The leader election's defaults (Options.LeaseDuration).
const (
	DefaultLeaseDuration = options.DefaultLeaseDuration
	DefaultRenewDeadline = options.DefaultRenewDeadline
	DefaultRetryPeriod   = options.DefaultRetryPeriod
)

// DefaultOptions are the production defaults.
func DefaultOptions() Options { return options.Default() }

// DefaultJobResources are what every Job's container requests unless the
// flags say otherwise (options.DefaultJobResources).
func DefaultJobResources() corev1.ResourceRequirements { return options.DefaultJobResources() }

// cacheOptions scope a cache to what the operator watches in a cluster:
// Petri's namespace, and there only the Secrets, Jobs and pods it created
// (slimmed), and the namespaces it created.
func cacheOptions(o Options) cache.Options {
	owned := labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: petriv1.ManagedByOperator})
	strip, slimJobs, slimPods := cacheTransforms()
	byObject := map[client.Object]cache.ByObject{
		&corev1.Namespace{}: {Label: owned},
		&corev1.Secret{}:    {Label: owned},
		&batchv1.Job{}:      {Label: owned, Transform: slimJobs},
		&corev1.Pod{}:       {Label: owned, Transform: slimPods},
	}
	workloadCaches(o, byObject)
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{o.ManagementNamespace: {}},
		DefaultTransform:  strip,
		ByObject:          byObject,
	}
}

// clientOptions: ownership decisions read namespaces and RoleBindings from
// the API server, never from a cache that filters by label.
func clientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{
		DisableFor: []client.Object{&corev1.Namespace{}, &rbacv1.RoleBinding{}},
	}}
}

// Scheme knows the built-in types and Petri's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntimeMust(clientgoscheme.AddToScheme(s))
	utilruntimeMust(petriv1.AddToScheme(s))
	return s
}

func utilruntimeMust(err error) {
	if err != nil {
		panic(err)
	}
}

// NewManager builds the operator's manager with its cache scoped to what it
// watches: Petri's resources, Jobs, ServiceAccounts and its own Secrets in the
// management namespace, and only the namespaces it created.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg = countAPIRequests(cfg)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        Scheme(),
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.ManagementNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.LeaseDuration,
		RenewDeadline:                 &o.RenewDeadline,
		RetryPeriod:                   &o.RetryPeriod,
		// A process may build its manager again after stopping it (the
		// tests restart the operator in-process); names stay unique within
		// one manager.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cacheOptions(o),
		Client:     clientOptions(),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	// The gauge reads this manager's cache; a manager built again in the same
	// process replaces the previous one's collector.
	collector := phaseCollector{reader: mgr.GetClient(), namespace: o.ManagementNamespace}
	metrics.Registry.Unregister(collector)
	if err := metrics.Registry.Register(collector); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	if err := releasebusy.IndexJobs(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("index jobs by release: %w", err)
	}
	if err := releasebusy.IndexPods(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("index pods by release: %w", err)
	}
	if err := jobwatch.IndexPodsByJob(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("index pods by job: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &petriv1.EphemeralEnvironment{}, shared.UsersIndex, func(obj client.Object) []string {
		return shared.UsedBy(obj.(*petriv1.EphemeralEnvironment))
	}); err != nil {
		return nil, fmt.Errorf("index environments by shared workload: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &petriv1.EphemeralEnvironment{}, indexDeployerServiceAccount, func(obj client.Object) []string {
		return []string{naming.DeployerServiceAccount(obj.GetName())}
	}); err != nil {
		return nil, fmt.Errorf("index environments by deployer identity: %w", err)
	}
	if err := indexEnvironments(mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	apiReader := route.Reader{Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Pick: func(t *clusters.Target) client.Reader { return t.APIReader }}
	namespaceCache := route.Reader{Reader: mgr.GetCache(), Scheme: mgr.GetScheme(), Pick: func(t *clusters.Target) client.Reader { return t.NamespaceCache }}
	sharedWorkloads := &sharedworkload.Reconciler{
		Client:         route.Client{Client: mgr.GetClient()},
		APIReader:      apiReader,
		NamespaceCache: namespaceCache,
		Recorder:       mgr.GetEventRecorder("petri-operator"),
		Options:        o,
	}
	environments := &EphemeralEnvironmentReconciler{
		Client:         route.Client{Client: mgr.GetClient()},
		APIReader:      apiReader,
		NamespaceCache: namespaceCache,
		Recorder:       mgr.GetEventRecorder("petri-operator"),
		Options:        o,
	}
	if err := setupWorkloadClusters(mgr, environments, sharedWorkloads, o); err != nil {
		return nil, err
	}
	if err := sharedWorkloads.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up SharedWorkload controller: %w", err)
	}
	if err := environments.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up EphemeralEnvironment controller: %w", err)
	}
	if err := (&SleepReconciler{environments}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up sleep controller: %w", err)
	}
	if err := (&VerifyReconciler{environments}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up verify controller: %w", err)
	}
	return mgr, nil
}

// indexEnvironments indexes the cached environments by UID and by the
// cluster they are placed in.
func indexEnvironments(indexer client.FieldIndexer) error {
	ctx := context.Background()
	if err := indexer.IndexField(ctx, &petriv1.EphemeralEnvironment{}, indexEnvironmentUID, func(obj client.Object) []string {
		return []string{string(obj.GetUID())}
	}); err != nil {
		return fmt.Errorf("index environments by UID: %w", err)
	}
	if err := indexer.IndexField(ctx, &petriv1.EphemeralEnvironment{}, clusters.PlacementIndex, clusters.PlacementKey); err != nil {
		return fmt.Errorf("index environments by cluster: %w", err)
	}
	return nil
}

// setupWorkloadClusters gives the environments their workload clusters'
// connections, kept by the WorkloadCluster controller; nothing with
// --workload-clusters=false.
func setupWorkloadClusters(mgr ctrl.Manager, environments *EphemeralEnvironmentReconciler, sharedWorkloads *sharedworkload.Reconciler, o Options) error {
	if !o.WorkloadClusters {
		return nil
	}
	registry := newClusterRegistry(o)
	registry.OnConnect = func(c *clusters.Conn) error {
		if err := environments.watchCluster(c); err != nil {
			return err
		}
		return sharedWorkloads.WatchCluster(c)
	}
	environments.clusters, sharedWorkloads.Clusters = registry, registry
	if err := mgr.Add(registry); err != nil {
		return err
	}
	wc := &workloadcluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clusters: registry, Options: o}
	if err := wc.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up WorkloadCluster controller: %w", err)
	}
	return nil
}
