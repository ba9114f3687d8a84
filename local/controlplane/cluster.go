// Package controlplane runs a real Kubernetes control plane on this machine,
// for the local run (make demo, make run) and for every test that needs the
// API server: etcd, kube-apiserver (through controller-runtime's envtest, RBAC
// and ServiceAccount admission on) and kube-controller-manager with the
// controllers Petri relies on, Petri's CRDs, and optionally a local node
// (package local/node) that runs pods as local processes.
//
// It stands in for a cluster's control plane and nothing else: there is no
// kubelet, scheduler, cloud provider, CNI or DNS; every binary is the real one,
// built by make controlplane into bin/.
package controlplane

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/internal/reporoot"
	"github.com/petri-dev/petri/local/node"
)

// DefaultControllers are the kube-controller-manager controllers Petri relies
// on: namespace deletion, garbage collection, Jobs and their TTL, default
// ServiceAccounts, and Deployments for the workloads.
var DefaultControllers = []string{
	"namespace-controller",
	"garbage-collector-controller",
	"job-controller",
	"serviceaccount-controller",
	"ttl-after-finished-controller",
	"deployment-controller",
	"replicaset-controller",
}

// ServiceClusterIPRange is the Services' address range of the local control
// plane, sized for thousands of environments.
const ServiceClusterIPRange = "10.0.0.0/16"

// Options configure a control plane.
type Options struct {
	// Dir holds the control plane's files and the local node's pods and logs;
	// a temporary directory when empty.
	Dir string
	// Images maps image names to local binaries for the local node. No local
	// node runs when it is empty.
	Images map[string]string
	// ImageFiles maps, per image name, a directory the image carries to a
	// local directory with the same files (see node.Options).
	ImageFiles map[string]map[string]string
	// Env is added to every process the local node runs (node.Options.Env):
	// what a test tells the programs that play its images, as a cluster
	// would put it in their pods' environment.
	Env []string
	// Controllers overrides DefaultControllers.
	Controllers []string
	// Output receives the output of kube-controller-manager; a log file in
	// Dir when nil.
	Output *os.File
	// APIServerAddress is the address kube-apiserver listens on, advertises
	// (the kubernetes Service's endpoint) and names in its serving
	// certificate; 127.0.0.1 when empty. A real node (local/realnode) gives
	// the address its network namespace reaches the host at, so kubelet,
	// kube-proxy and pods reach the API server where it says it is. The
	// certificate then also names the kubernetes Service (10.0.0.1,
	// kubernetes.default.svc), for pods' in-cluster clients, and the API
	// server reaches kubelets at their InternalIP first (their host names
	// resolve nowhere).
	APIServerAddress string
	// SkipCRDs starts the control plane without Petri's CRDs, as a workload
	// cluster is (it runs environments' Jobs, not Petri's resources).
	SkipCRDs bool
}

// Cluster is a running local control plane.
type Cluster struct {
	// Config authenticates as a cluster administrator (system:masters).
	Config *rest.Config
	// Client is a controller-runtime client with Petri's types registered.
	Client client.WithWatch
	// Clientset is a typed client-go clientset.
	Clientset kubernetes.Interface
	// Kubeconfig is the path of an administrator kubeconfig file.
	Kubeconfig string
	// Node runs pods; nil when Options.Images is empty.
	Node *node.Node
	// Dir is the working directory of this control plane.
	Dir string

	env     *envtest.Environment
	kcm     *exec.Cmd
	kcmDone chan struct{}
	cancel  context.CancelFunc
	nodeErr chan error
	ownDir  bool
	stopped sync.Once

	// restartMu guards apiServer, the kube-apiserver RestartAPIServer
	// started in place of envtest's (nil until then).
	restartMu sync.Mutex
	apiServer *apiServerProcess
}

// Scheme knows the built-in types and Petri's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := petriv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// RepoRoot finds the repository root (the directory holding go.mod) from the
// working directory.
func RepoRoot() (string, error) { return reporoot.Find() }

// AssetsDir is where the control plane binaries are: KUBEBUILDER_ASSETS, or
// bin/ in the repository.
func AssetsDir() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// Start starts etcd, kube-apiserver, kube-controller-manager and, with
// Images, a local node; it installs Petri's CRDs from config/crd/bases
// unless SkipCRDs. Each control plane has its own data directory and free
// ports, so several run side by side (a management cluster and workload
// clusters).
func Start(opts Options) (_ *Cluster, err error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("control plane binary %s missing in %s: run 'make controlplane'", b, assets)
		}
	}
	c := &Cluster{Dir: opts.Dir}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "petri-cluster-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()

	c.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	if opts.SkipCRDs {
		c.env.CRDDirectoryPaths, c.env.ErrorIfCRDPathMissing = nil, false
	}
	c.env.ControlPlane.GetAPIServer().Configure().
		// Admission plugins a cluster runs, so Petri meets them here too.
		Set("enable-admission-plugins", "NamespaceLifecycle,ServiceAccount,DefaultStorageClass,ResourceQuota,OwnerReferencesPermissionEnforcement").
		Set("service-account-max-token-expiration", "48h").
		// Every environment's Services take addresses from this range: a
		// /16 holds 65,534, enough for 2,000 environments of several
		// components (the default /24 filled up after about 85).
		Set("service-cluster-ip-range", ServiceClusterIPRange).
		Disable("disable-admission-plugins")
	if opts.APIServerAddress != "" {
		if err := listenOn(c.env.ControlPlane.GetAPIServer(), opts.APIServerAddress, filepath.Join(c.Dir, "apiserver-certs")); err != nil {
			return nil, err
		}
	}
	c.Config, err = c.env.Start()
	if err != nil {
		return nil, fmt.Errorf("start etcd and kube-apiserver: %w", err)
	}
	c.Config.QPS, c.Config.Burst = 500, 1000
	if c.Client, err = client.NewWithWatch(c.Config, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	if c.Clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	c.Kubeconfig, err = c.WriteKubeconfig("admin", "system:masters")
	if err != nil {
		return nil, err
	}
	if err := c.startControllerManager(opts); err != nil {
		return nil, err
	}
	if len(opts.Images) > 0 {
		c.Node, err = node.New(c.Config, node.Options{Images: opts.Images, ImageFiles: opts.ImageFiles, Env: opts.Env, Dir: filepath.Join(c.Dir, "node")})
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		c.nodeErr = make(chan error, 1)
		go func() { c.nodeErr <- c.Node.Run(ctx) }()
	}
	return c, nil
}

// listenOn makes the API server listen on and advertise address, on a port
// free there, with a serving certificate that also names the kubernetes
// Service, written into certDir.
func listenOn(s *envtest.APIServer, address, certDir string) error {
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		return fmt.Errorf("find a free port on %s for kube-apiserver: %w", address, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return err
	}
	s.SecureServing.Address, s.SecureServing.Port = address, strconv.Itoa(port)
	if s.SecureServing.CA, err = writeServingCerts(certDir, address); err != nil {
		return err
	}
	s.CertDir = certDir
	s.Configure().Set("advertise-address", address).
		Set("kubelet-preferred-address-types", "InternalIP,Hostname")
	return nil
}

// WriteKubeconfig writes a kubeconfig for a user authenticated by a client
// certificate and returns its path.
func (c *Cluster) WriteKubeconfig(name string, groups ...string) (string, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "kubeconfig-"+name)
	return path, os.WriteFile(path, data, 0o600)
}

// UserConfig returns a rest.Config for a user with the given groups, for
// authorization tests.
func (c *Cluster) UserConfig(name string, groups ...string) (*rest.Config, error) {
	u, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.Config(), nil
}

// ServiceAccountConfig returns a rest.Config that authenticates as a
// ServiceAccount with a token from the TokenRequest API.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	tr, err := c.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

func (c *Cluster) startControllerManager(opts Options) error {
	assets, err := AssetsDir()
	if err != nil {
		return err
	}
	kubeconfig, err := c.WriteKubeconfig("kube-controller-manager", "system:masters")
	if err != nil {
		return err
	}
	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	// Pods need their namespace's default ServiceAccount and the
	// kube-root-ca.crt ConfigMap of their token volume (start-up waits for the
	// ServiceAccount); the admin, edit and view ClusterRoles are aggregated.
	for _, required := range []string{"serviceaccount-controller", "root-ca-certificate-publisher-controller", "clusterrole-aggregation-controller"} {
		if !slices.Contains(controllers, required) {
			controllers = append(slices.Clone(controllers), required)
		}
	}
	caFile := filepath.Join(c.Dir, "ca.crt")
	if err := os.WriteFile(caFile, c.Config.CAData, 0o600); err != nil {
		return err
	}
	out := opts.Output
	if out == nil {
		if out, err = os.Create(filepath.Join(c.Dir, "kube-controller-manager.log")); err != nil {
			return err
		}
	}
	c.kcm = exec.Command(filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		"--root-ca-file="+caFile,
		"--secure-port=0",
		// Sized for thousands of environments created at once: every
		// environment's Jobs, pods and namespace go through the Job,
		// garbage collector and namespace controllers, and one namespace
		// deletion alone is two requests per namespaced resource type, so
		// the default client limits would hold environments back
		// (docs/benchmarks.md has the figures).
		"--concurrent-job-syncs=50",
		"--concurrent-namespace-syncs=50",
		"--concurrent-gc-syncs=50",
		"--concurrent-ttl-after-finished-syncs=10",
		"--kube-api-qps=2000",
		"--kube-api-burst=4000",
	)
	c.kcm.Stdout, c.kcm.Stderr = out, out
	if err := c.kcm.Start(); err != nil {
		return fmt.Errorf("start kube-controller-manager: %w", err)
	}
	c.kcmDone = make(chan struct{})
	go func() { _ = c.kcm.Wait(); close(c.kcmDone) }()

	// The controller manager is up when its ServiceAccount controller has
	// created the default ServiceAccount of the default namespace.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		_, err := c.Clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-c.kcmDone:
			return fmt.Errorf("kube-controller-manager exited at start; see %s", out.Name())
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager did not start within 60s; see %s", out.Name())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops every process and removes the temporary directory. It is safe
// to call more than once.
func (c *Cluster) Stop() {
	c.stopped.Do(func() {
		if c.cancel != nil {
			c.cancel()
			<-c.nodeErr
		}
		if c.kcm != nil && c.kcm.Process != nil {
			_ = c.kcm.Process.Kill()
			<-c.kcmDone
		}
		c.stopRestartedAPIServer()
		if c.env != nil {
			_ = c.env.Stop()
		}
		if c.ownDir && os.Getenv("PETRI_KEEP_CLUSTER_DIR") == "" {
			_ = os.RemoveAll(c.Dir)
		}
	})
}

// CreateNamespace creates a namespace with a generated name and returns it.
func (c *Cluster) CreateNamespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Client.Create(ctx, ns); err != nil {
		return "", err
	}
	return ns.Name, nil
}
