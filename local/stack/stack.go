// Package stack runs Petri end to end on this machine, the way a cluster runs
// it: a real control plane (etcd, kube-apiserver, kube-controller-manager),
// the local node running every pod as a local process, Petri installed from
// config/ with kubectl apply -k (so the operator and sync run as the
// Deployments a cluster would run, with their ServiceAccounts and RBAC), a
// git config repository made from examples/app/config-repo, and a local
// stand-in for the GitHub API that sync talks to and that sends signed
// webhooks. The Scenario plays a pull request's life against it.
//
// cmd/petri-local (make demo, make run) and the end-to-end test (tests/e2e)
// both use it, so the demo and the test are the same code. It stands in for
// a cluster and GitHub on one machine; it is not a way to run Petri for a
// team (install it into a cluster for that: docs/install.md).
package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/hack/images"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/node"
	"github.com/petri-dev/petri/local/realnode"
)

// Names of the binaries a Stack runs; Options.Binaries maps them to files.
const (
	BinOperator   = "petri-operator"
	BinSync       = "petri-sync"
	BinDeployer   = "petri-deployer"
	BinExampleApp = "petri-example-app"
	BinKubectl    = "kubectl"
)

// Fixed names of the installation and the demo.
const (
	// ManagementNamespace, SharedNamespace and SyncNamespace are
	// config/default's.
	ManagementNamespace = "petri-system"
	SharedNamespace     = "petri-shared"
	SyncNamespace       = "petri-sync"
	// ExampleAppImage is the example chart's image; the local node plays it
	// with the example application.
	ExampleAppImage = "petri.dev/example-app"
	// DeployerCharts is where the deployer image carries examples/charts.
	DeployerCharts = "/charts"
	// DefaultIngressAddress is where make demo and make run serve Ingress
	// rules; examples/app/config-repo's URLs name it.
	DefaultIngressAddress = "localhost:8480"
)

// Options configure a Stack.
type Options struct {
	// Dir holds everything of the run: the control plane, the node's pods
	// and logs, the config repository and the install overlay.
	Dir string
	// Binaries maps BinOperator, BinSync, BinDeployer, BinExampleApp and
	// BinKubectl to executables.
	Binaries map[string]string
	// IngressAddress is where Ingress rules are served (host:port; port 0
	// picks a free one). DefaultIngressAddress when empty.
	IngressAddress string
	// ConfigSource is the directory the config repository is made from;
	// examples/app/config-repo when empty.
	ConfigSource string
	// Report receives progress; nil discards it.
	Report *Report
	// Install is how Petri is installed: InstallKustomize (kubectl apply -k
	// of config/default and an overlay, the default) or InstallChart (helm
	// install of charts/petri).
	Install string
	// Images maps more images to binaries for the local node, such as a
	// shared workload's server and steps.
	Images map[string]string
	// DeployerFiles maps more directories inside the deployer image to
	// directories here, such as charts beside examples/charts.
	DeployerFiles map[string]string
	// StepImages are more image prefixes provision and deprovision Jobs may
	// run (step-images of the ConfigMap petri-operator).
	StepImages []string
	// Forge is where the demo application's pull requests are:
	// ForgeGitHub (the stand-in, the default), ForgeGitea (a real Gitea)
	// or ForgeGitLab (the GitLab stand-in, the project GitLabProject);
	// the last two with the kustomize install only.
	Forge string
	// Forges are more forges the stack starts beside GitHub and Forge, for
	// sync to serve too (ForgeGitea, ForgeGitLab): the applications on
	// them come from ConfigSource.
	Forges []string
	// Node runs the pods: NodeProcess (local/node, the default) or
	// NodeReal (local/realnode: real containers from Petri's images; root,
	// GitHub only).
	Node string
	// WorkloadPodSecurity is the installation's Pod Security level of the
	// namespaces Petri creates (operator.workloadPodSecurity,
	// workload-pod-security); the installation's default (baseline) when
	// empty.
	WorkloadPodSecurity string
	// Clusters is how many clusters run: 1 (the default) is the management
	// cluster alone; more start workload clusters beside it (east, then
	// west, north, south), each its own control plane and process node
	// with Petri's workload-cluster objects (config/workload, or the
	// chart's workload mode), registered in the management cluster by a
	// Secret petri-cluster-<name> and a WorkloadCluster.
	Clusters int
}

// Stack is Petri running on this machine.
type Stack struct {
	opts Options
	root string

	// Cluster is the control plane; Cluster.Client is a cluster administrator.
	Cluster *controlplane.Cluster
	// Client is Cluster.Client.
	Client client.WithWatch
	// Node runs the pods on the process node; nil on the real node.
	Node *node.Node
	// RealNode runs them on the real node; nil on the process node.
	RealNode *realnode.Node
	// GitHub is the GitHub API stand-in.
	GitHub *githubapi.Server
	// Gitea is the Gitea server and what the stack made on it, when
	// Options.Forge or Options.Forges name ForgeGitea; nil otherwise.
	Gitea *GiteaForge
	// GitLab is the GitLab stand-in and what the stack made on it, when
	// Options.Forge or Options.Forges name ForgeGitLab; nil otherwise.
	GitLab *GitLabForge
	// ConfigRepo is the git config repository sync reads, and
	// ConfigRepoURL where sync reads it (a file:// URL on the process node,
	// the stack's git server on the real node).
	ConfigRepo, ConfigRepoURL string
	// IngressURL serves the cluster's Ingress rules: the environments' URLs
	// and sync's webhook endpoint.
	IngressURL string
	// WebhookURL is where GitHub would deliver webhooks.
	WebhookURL string
	// WebhookSecret signs the webhooks.
	WebhookSecret []byte
	// Overlay is the kustomization that installed Petri: config/default
	// plus this machine's settings.
	Overlay string

	// token is the GitHub token the stand-in accepts.
	token           string
	pulls           pulls
	ingress         *http.Server
	ingressListener net.Listener
	stopNode        context.CancelFunc
	nodeDone        chan error
	// appImage is the example application's image, gitServer serves the
	// config repository: the real node only.
	appImage  images.Built
	gitServer *http.Server
	// workload are the workload clusters (Options.Clusters); stopRenew
	// ends the renewal of their tokens, which closes renewDone.
	workload  []*workloadCluster
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

// Dir is the run's directory.
func (s *Stack) Dir() string { return s.opts.Dir }

// Kubeconfig is the administrator kubeconfig, for kubectl.
func (s *Stack) Kubeconfig() string { return s.Cluster.Kubeconfig }

// Start brings Petri up and returns once the operator and sync are ready.
// On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	if opts.ConfigSource == "" {
		opts.ConfigSource = filepath.Join(root, "examples", "app", "config-repo")
	}
	s := &Stack{opts: opts, root: root}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	r := opts.Report

	// The ingress port is taken first: the config repository names it.
	if err := s.listenIngress(r); err != nil {
		return nil, err
	}
	if opts.Node == NodeReal {
		err = s.startRealNode(ctx, r)
	} else {
		err = s.startControlPlane(r)
	}
	if err != nil {
		return nil, err
	}
	if opts.serves(ForgeGitea) {
		if err := s.startGitea(r); err != nil {
			return nil, err
		}
	}
	if opts.serves(ForgeGitLab) {
		if err := s.startGitLab(r); err != nil {
			return nil, err
		}
	}
	images, deployerImage, err := s.manifests(ctx, r)
	if err != nil {
		return nil, err
	}
	if opts.Node == NodeReal {
		s.startRealIngress()
	} else if err := s.startNode(r, images, deployerImage); err != nil {
		return nil, err
	}
	if err := s.install(ctx, r); err != nil {
		return nil, err
	}
	// While the operator and sync start in the management cluster.
	if err := s.startWorkloadClusters(ctx, r, images, deployerImage); err != nil {
		return nil, err
	}
	step := r.Begin("Operator and sync ready (Deployments in " + ManagementNamespace + " and " + SyncNamespace + ")")
	if err := s.waitDeployments(ctx, 3*time.Minute, ManagementNamespace+"/petri-operator", SyncNamespace+"/petri-sync"); err != nil {
		return nil, step.Fail(err)
	}
	if err := s.waitServed(ctx); err != nil {
		return nil, step.Fail(err)
	}
	step.Done("")
	if s.Gitea != nil {
		if err := s.hookGitea(r); err != nil {
			return nil, err
		}
	}
	if s.GitLab != nil {
		s.hookGitLab(r)
	}
	return s, nil
}

// complete checks the options and fills in their defaults.
func (opts *Options) complete() error {
	if opts.Dir == "" {
		return errors.New("e2e: Options.Dir is required")
	}
	bins := []string{BinOperator, BinSync, BinDeployer, BinExampleApp, BinKubectl}
	if opts.Node == NodeReal {
		bins = []string{BinKubectl} // the rest are built into images
	}
	for _, b := range bins {
		if _, err := os.Stat(opts.Binaries[b]); err != nil {
			return fmt.Errorf("binary %s: %w (make build builds it)", b, err)
		}
	}
	if opts.IngressAddress == "" {
		opts.IngressAddress = DefaultIngressAddress
	}
	switch opts.Install {
	case "":
		opts.Install = InstallKustomize
	case InstallKustomize, InstallChart:
	default:
		return fmt.Errorf("install %q: want %q or %q", opts.Install, InstallKustomize, InstallChart)
	}
	if opts.Forge == "" {
		opts.Forge = ForgeGitHub
	}
	switch opts.Node {
	case "":
		opts.Node = NodeProcess
	case NodeProcess:
	case NodeReal:
		if opts.Forge != ForgeGitHub || len(opts.Forges) > 0 || len(opts.Images) > 0 || len(opts.DeployerFiles) > 0 {
			return fmt.Errorf("node %s plays GitHub's pull requests with the example application only (no other forge, images or deployer files)", NodeReal)
		}
	default:
		return fmt.Errorf("node %q: want %q or %q", opts.Node, NodeProcess, NodeReal)
	}
	if err := opts.checkClusters(); err != nil {
		return err
	}
	for _, f := range append([]string{opts.Forge}, opts.Forges...) {
		switch f {
		case ForgeGitHub:
		case ForgeGitea, ForgeGitLab:
			if opts.Install != InstallKustomize {
				return fmt.Errorf("forge %s is played with the %s install only", f, InstallKustomize)
			}
		default:
			return fmt.Errorf("forge %q: want %q, %q or %q", f, ForgeGitHub, ForgeGitea, ForgeGitLab)
		}
	}
	return nil
}

// serves reports whether the stack starts a forge.
func (opts *Options) serves(forge string) bool {
	return opts.Forge == forge || slices.Contains(opts.Forges, forge)
}

// listenIngress takes the ingress port and sets IngressURL and WebhookURL;
// the ingress serves once the node runs.
func (s *Stack) listenIngress(r *Report) error {
	step := r.Begin("Local ingress")
	l, err := net.Listen("tcp", ingressListenAddress(s.opts.IngressAddress))
	if err != nil {
		return step.Fail(fmt.Errorf("listen on %s for the local ingress: %w (is another make run still running?)", s.opts.IngressAddress, err))
	}
	s.ingress = &http.Server{ReadHeaderTimeout: 10 * time.Second}
	s.ingressListener = l
	host, _, _ := net.SplitHostPort(s.opts.IngressAddress)
	if host == "" || host == "0.0.0.0" {
		host = "localhost"
	}
	s.IngressURL = fmt.Sprintf("http://%s:%d", host, l.Addr().(*net.TCPAddr).Port)
	s.WebhookURL = s.IngressURL + "/webhooks/github"
	step.Done(s.IngressURL)
	return nil
}

// startControlPlane starts etcd, kube-apiserver and kube-controller-manager.
func (s *Stack) startControlPlane(r *Report) error {
	step := r.Begin("Control plane: etcd, kube-apiserver, kube-controller-manager")
	if err := os.MkdirAll(filepath.Join(s.opts.Dir, "cluster"), 0o755); err != nil {
		return step.Fail(err)
	}
	var err error
	s.Cluster, err = controlplane.Start(controlplane.Options{Dir: filepath.Join(s.opts.Dir, "cluster")})
	if err != nil {
		return step.Fail(err)
	}
	s.Client = s.Cluster.Client
	step.Done(s.Cluster.Config.Host)
	return nil
}

// startNode starts the local node playing images (the deployer image with
// its files mapped) and the ingress in front of it.
func (s *Stack) startNode(r *Report, images map[string]string, deployerImage string) error {
	step := r.Begin("Local node")
	var err error
	s.Node, err = node.New(s.Cluster.Config, node.Options{
		Images:     images,
		Dir:        filepath.Join(s.opts.Dir, "node"),
		ImageFiles: map[string]map[string]string{imageName(deployerImage): s.deployerFiles(s.root)},
	})
	if err != nil {
		return step.Fail(err)
	}
	nodeCtx, cancel := context.WithCancel(context.Background())
	s.stopNode, s.nodeDone = cancel, make(chan error, 1)
	go func() { s.nodeDone <- s.Node.Run(nodeCtx) }()
	s.ingress.Handler = s.Node.Ingress()
	go func() { _ = s.ingress.Serve(s.ingressListener) }()
	step.Done(fmt.Sprintf("%d images", len(images)))
	return nil
}

// ingressListenAddress listens on loopback for "localhost".
func ingressListenAddress(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "localhost" || host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// Stop stops every process. The run's directory (logs) stays.
func (s *Stack) Stop() {
	if s.ingress != nil {
		_ = s.ingress.Close()
		_ = s.ingressListener.Close()
	}
	if s.stopNode != nil {
		s.stopNode()
		<-s.nodeDone
	}
	if s.gitServer != nil {
		_ = s.gitServer.Close()
	}
	s.stopWorkloadClusters()
	if s.RealNode != nil {
		s.RealNode.Stop() // the control plane with it
	} else if s.Cluster != nil {
		s.Cluster.Stop()
	}
	if s.GitHub != nil {
		s.GitHub.Close()
	}
	if s.Gitea != nil {
		for _, p := range []*FaultProxy{s.Gitea.API, s.Gitea.Hooks} {
			if p != nil {
				p.Close()
			}
		}
		s.Gitea.Server.Stop()
	}
	if s.GitLab != nil {
		s.GitLab.API.Close()
		s.GitLab.Server.Close()
	}
}

// waitDeployments waits until the Deployments (namespace/name) have all
// their replicas updated and available.
func (s *Stack) waitDeployments(ctx context.Context, timeout time.Duration, keys ...string) error {
	return poll(ctx, timeout, func() (bool, error) {
		for _, k := range keys {
			ns, n, _ := strings.Cut(k, "/")
			var d appsv1.Deployment
			if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &d); err != nil {
				return false, nil
			}
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want ||
				d.Status.Replicas != want {
				return false, nil
			}
			// A rollout is over once the old pods are gone, not only
			// stopping: until then they may still answer requests.
			sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			if err != nil {
				return false, fmt.Errorf("deployment %s: %w", k, err)
			}
			var pods corev1.PodList
			if err := s.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
				return false, nil
			}
			live := int32(0)
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil {
					return false, nil
				}
				if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					live++
				}
			}
			if live != want {
				return false, nil
			}
		}
		return true, nil
	}, func() string {
		return s.podSummary(ctx, ManagementNamespace) + s.podSummary(ctx, SyncNamespace)
	})
}

// podSummary describes the pods of a namespace for error messages.
func (s *Stack) podSummary(ctx context.Context, ns string) string {
	var pods corev1.PodList
	if err := s.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n  pod %s: %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " (container %s ready=%t restarts=%d)", cs.Name, cs.Ready, cs.RestartCount)
		}
		if p.Spec.NodeName == "" && s.Node != nil {
			b.WriteString(" (not scheduled: the local node does not know its image)")
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " (%s: %s %s)", cs.Name, w.Reason, w.Message)
			}
		}
	}
	fmt.Fprintf(&b, "\n  logs: %s", s.LogDir())
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
