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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/node"
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
}

// Stack is Petri running on this machine.
type Stack struct {
	opts Options
	root string

	// Cluster is the control plane; Cluster.Client is a cluster administrator.
	Cluster *controlplane.Cluster
	// Client is Cluster.Client.
	Client client.WithWatch
	// Node runs the pods.
	Node *node.Node
	// GitHub is the GitHub API stand-in.
	GitHub *githubapi.Server
	// ConfigRepo is the git config repository sync reads.
	ConfigRepo string
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
}

// Dir is the run's directory.
func (s *Stack) Dir() string { return s.opts.Dir }

// Kubeconfig is the administrator kubeconfig, for kubectl.
func (s *Stack) Kubeconfig() string { return s.Cluster.Kubeconfig }

// LogDir holds one log file per container of every pod the node ran:
// <namespace>_<pod>_<container>.log.
func (s *Stack) LogDir() string { return s.Node.LogDir() }

// ControlPlaneLog is kube-controller-manager's log.
func (s *Stack) ControlPlaneLog() string {
	return filepath.Join(s.Cluster.Dir, "kube-controller-manager.log")
}

// Start brings Petri up and returns once the operator and sync are ready.
// On error everything started so far is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.Dir == "" {
		return nil, errors.New("e2e: Options.Dir is required")
	}
	for _, b := range []string{BinOperator, BinSync, BinDeployer, BinExampleApp, BinKubectl} {
		if _, err := os.Stat(opts.Binaries[b]); err != nil {
			return nil, fmt.Errorf("binary %s: %w (make build builds it)", b, err)
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
		return nil, fmt.Errorf("install %q: want %q or %q", opts.Install, InstallKustomize, InstallChart)
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
	step := r.Begin("Local ingress")
	l, err := net.Listen("tcp", ingressListenAddress(opts.IngressAddress))
	if err != nil {
		return nil, step.Fail(fmt.Errorf("listen on %s for the local ingress: %w (is another make run still running?)", opts.IngressAddress, err))
	}
	s.ingress = &http.Server{ReadHeaderTimeout: 10 * time.Second}
	s.ingressListener = l
	host, _, _ := net.SplitHostPort(opts.IngressAddress)
	if host == "" || host == "0.0.0.0" {
		host = "localhost"
	}
	s.IngressURL = fmt.Sprintf("http://%s:%d", host, l.Addr().(*net.TCPAddr).Port)
	s.WebhookURL = s.IngressURL + "/webhooks/github"
	step.Done(s.IngressURL)

	step = r.Begin("Control plane: etcd, kube-apiserver, kube-controller-manager")
	if err := os.MkdirAll(filepath.Join(opts.Dir, "cluster"), 0o755); err != nil {
		return nil, step.Fail(err)
	}
	s.Cluster, err = controlplane.Start(controlplane.Options{Dir: filepath.Join(opts.Dir, "cluster")})
	if err != nil {
		return nil, step.Fail(err)
	}
	s.Client = s.Cluster.Client
	step.Done(s.Cluster.Config.Host)

	step = r.Begin("Petri's manifests: " + map[string]string{InstallKustomize: "kubectl kustomize", InstallChart: "helm template charts/petri"}[opts.Install])
	s.token = randomHex(20)
	s.GitHub = githubapi.New(githubapi.Options{Tokens: []string{s.token}})
	s.WebhookSecret = []byte(randomHex(32))
	s.ConfigRepo = filepath.Join(opts.Dir, "config-repo")
	if err := s.makeConfigRepo(); err != nil {
		return nil, step.Fail(err)
	}
	if err := s.writeOverlay(); err != nil {
		return nil, step.Fail(err)
	}
	var objs []*unstructured.Unstructured
	if opts.Install == InstallChart {
		objs, err = s.renderChart()
	} else {
		var manifests string
		if manifests, err = s.kubectl(ctx, "kustomize", s.Overlay); err == nil {
			objs, err = decodeManifests([]byte(manifests))
		}
	}
	if err != nil {
		return nil, step.Fail(err)
	}
	images, deployerImage, err := s.images(objs)
	if err != nil {
		return nil, step.Fail(err)
	}
	for image, bin := range opts.Images {
		images[image] = bin
	}
	step.Done(fmt.Sprintf("%d objects", len(objs)))
	rel, _ := filepath.Rel(root, opts.ConfigSource)
	r.Event("config repository: %s (git, made from %s)", s.ConfigRepo, rel)
	r.Event("GitHub API stand-in: %s", s.GitHub.URL)

	step = r.Begin("Local node")
	s.Node, err = node.New(s.Cluster.Config, node.Options{
		Images:     images,
		Dir:        filepath.Join(opts.Dir, "node"),
		ImageFiles: map[string]map[string]string{imageName(deployerImage): s.deployerFiles(root)},
	})
	if err != nil {
		return nil, step.Fail(err)
	}
	nodeCtx, cancel := context.WithCancel(context.Background())
	s.stopNode, s.nodeDone = cancel, make(chan error, 1)
	go func() { s.nodeDone <- s.Node.Run(nodeCtx) }()
	s.ingress.Handler = s.Node.Ingress()
	go func() { _ = s.ingress.Serve(l) }()
	step.Done(fmt.Sprintf("%d images", len(images)))

	var out string
	if opts.Install == InstallChart {
		step = r.Begin("Install Petri: helm install " + ChartRelease + " charts/petri (+ this machine's values)")
		out, err = s.installChart(ctx)
	} else {
		step = r.Begin("Install Petri: kubectl apply -k config/default (+ this machine's settings)")
		out, err = s.kubectl(ctx, "apply", "-k", s.Overlay)
	}
	if err != nil {
		return nil, step.Fail(err)
	}
	step.Done(fmt.Sprintf("%d objects", strings.Count(strings.TrimSpace(out), "\n")+1))
	r.Detail(out)

	step = r.Begin("Operator and sync ready (Deployments in " + ManagementNamespace + " and " + SyncNamespace + ")")
	if err := s.waitDeployments(ctx, 3*time.Minute, ManagementNamespace+"/petri-operator", SyncNamespace+"/petri-sync"); err != nil {
		return nil, step.Fail(err)
	}
	step.Done("")
	return s, nil
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
	if s.Cluster != nil {
		s.Cluster.Stop()
	}
	if s.GitHub != nil {
		s.GitHub.Close()
	}
}

// kubectl runs the bundled kubectl as the cluster administrator.
func (s *Stack) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.opts.Binaries[BinKubectl], append([]string{"--kubeconfig", s.Cluster.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// Kubectl runs kubectl as the cluster administrator and returns its output.
func (s *Stack) Kubectl(ctx context.Context, args ...string) (string, error) {
	return s.kubectl(ctx, args...)
}

// decodeManifests parses a multi-document YAML stream.
func decodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("read manifests: %w", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// images maps the images of the installation to binaries: the operator's
// and sync's images and the deployer image of the ConfigMap petri-operator,
// read from the built manifests so the local node plays exactly what the
// installation names, and the example application's. It also returns the deployer image.
func (s *Stack) images(objs []*unstructured.Unstructured) (map[string]string, string, error) {
	m := map[string]string{ExampleAppImage: s.opts.Binaries[BinExampleApp]}
	var deployer string
	found := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetName() == "petri-operator" {
			if v, ok, _ := unstructured.NestedString(u.Object, "data", "deployer-image"); ok && v != "" {
				m[imageName(v)] = s.opts.Binaries[BinDeployer]
				deployer = v
			}
			continue
		}
		if u.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			return nil, "", fmt.Errorf("read Deployment %s: %w", u.GetName(), err)
		}
		if len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		c := d.Spec.Template.Spec.Containers[0]
		switch d.Name {
		case "petri-operator":
			m[imageName(c.Image)] = s.opts.Binaries[BinOperator]
			found[d.Name] = true
		case "petri-sync":
			m[imageName(c.Image)] = s.opts.Binaries[BinSync]
			found[d.Name] = true
		}
	}
	if !found["petri-operator"] || !found["petri-sync"] || deployer == "" {
		return nil, "", errors.New("the manifests lack the petri-operator or petri-sync Deployment, or deployer-image in the ConfigMap petri-operator")
	}
	return m, deployer, nil
}

// imageName strips the tag and digest from an image reference.
func imageName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// makeConfigRepo makes a git repository from Options.ConfigSource
// (examples/app/config-repo). The one change is the ingress address in the
// URLs, when it is not the default.
func (s *Stack) makeConfigRepo() error {
	src := s.opts.ConfigSource
	addr := strings.TrimPrefix(s.IngressURL, "http://")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(s.ConfigRepo, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data = bytes.ReplaceAll(data, []byte(DefaultIngressAddress), []byte(addr))
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		return fmt.Errorf("config repository: %w", err)
	}
	repo, err := git.PlainInitWithOptions(s.ConfigRepo, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		return fmt.Errorf("config repository: %w", err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return err
	}
	if err := wt.AddGlob("."); err != nil {
		return fmt.Errorf("config repository: %w", err)
	}
	_, err = wt.Commit("Petri config for the local run, from "+src, &git.CommitOptions{
		Author: &object.Signature{Name: "Petri", Email: "petri@localhost", When: time.Now()},
	})
	return err
}

// writeOverlay writes the kustomization that installs Petri here:
// config/default with the settings and Secret a user provides, plus an
// Ingress for sync's webhook and API.
func (s *Stack) writeOverlay() error {
	s.Overlay = filepath.Join(s.opts.Dir, "install")
	if err := os.MkdirAll(s.Overlay, 0o755); err != nil {
		return err
	}
	base, err := filepath.Rel(s.Overlay, filepath.Join(s.root, "config", "default"))
	if err != nil {
		return err
	}
	order, err := SortOptions(filepath.Join(s.root, "config", "default"))
	if err != nil {
		return err
	}
	files := map[string]string{
		"kustomization.yaml": fmt.Sprintf(`# Petri's installation on this machine: config/default with the settings
# and credentials a user supplies in an overlay (docs/install.md).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
  - webhook-ingress.yaml
configMapGenerator:
  - name: petri-sync
    namespace: %s
    behavior: merge
    literals:
      - config-repo=file://%s
      - github-api-url=%s
  # The example shared workload provisions with the example application.
  - name: petri-operator
    namespace: %s
    behavior: merge
    literals:
      - "step-images=%s"
secretGenerator:
  - name: petri-sync
    namespace: %s
    options:
      disableNameSuffixHash: true
    files:
      - webhook-secret
      - github-token
%s`, base, SyncNamespace, s.ConfigRepo, s.GitHub.URL, ManagementNamespace, strings.Join(s.stepImages(), ","), SyncNamespace, order),
		"webhook-ingress.yaml": fmt.Sprintf(`# GitHub's webhooks, the read API and the web page (/ and /ui/) reach
# petri-sync through the ingress.
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: petri-sync
  namespace: %s
spec:
  rules:
    - http:
        paths:
          - path: /webhooks/
            pathType: Prefix
            backend:
              service:
                name: petri-sync
                port:
                  name: http
          - path: /api/
            pathType: Prefix
            backend:
              service:
                name: petri-sync
                port:
                  name: http
          - path: /
            pathType: Exact
            backend:
              service:
                name: petri-sync
                port:
                  name: http
          - path: /ui/
            pathType: Prefix
            backend:
              service:
                name: petri-sync
                port:
                  name: http
`, SyncNamespace),
		"webhook-secret": string(s.WebhookSecret),
		"github-token":   s.token,
	}
	for name, data := range files {
		mode := os.FileMode(0o644)
		if name == "webhook-secret" || name == "github-token" {
			mode = 0o600
		}
		if err := os.WriteFile(filepath.Join(s.Overlay, name), []byte(data), mode); err != nil {
			return err
		}
	}
	return nil
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
			if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want {
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
		if p.Spec.NodeName == "" {
			b.WriteString(" (not scheduled: the local node does not know its image)")
		}
	}
	fmt.Fprintf(&b, "\n  logs: %s", s.Node.LogDir())
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// WriteLogIndex tells where the logs of every process and every pod are.
func (s *Stack) WriteLogIndex(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Logs")
	fmt.Fprintf(w, "  every pod's containers (operator, sync, every Job, the applications): %s\n", s.LogDir())
	fmt.Fprintln(w, "  one file per container, <namespace>_<pod>_<container>.log:")
	entries, _ := os.ReadDir(s.LogDir())
	groups := map[string][]string{}
	var order []string
	for _, e := range entries {
		name := e.Name()
		ns, rest, _ := strings.Cut(name, "_")
		var g string
		switch {
		case ns == ManagementNamespace && strings.HasPrefix(rest, "petri-operator-"):
			g = "operator"
		case ns == SyncNamespace && strings.HasPrefix(rest, "petri-sync-"):
			g = "sync"
		case ns == ManagementNamespace:
			g = "Jobs (deploy, bind, provision, undeploy, deprovision)"
		case ns == SharedNamespace:
			g = "shared workloads"
		default:
			g = "applications"
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], name)
	}
	for _, g := range order {
		fmt.Fprintf(w, "    %s:\n", g)
		for _, f := range groups[g] {
			fmt.Fprintf(w, "      %s\n", f)
		}
	}
	fmt.Fprintf(w, "  kube-controller-manager: %s\n", s.ControlPlaneLog())
	if s.opts.Install == InstallChart {
		fmt.Fprintf(w, "  the installation (helm release %s of charts/petri, values): %s\n", ChartRelease, filepath.Join(s.Overlay, "values.yaml"))
	} else {
		fmt.Fprintf(w, "  the installation (kustomize overlay of config/default): %s\n", s.Overlay)
	}
}

// SortOptions returns the sortOptions block of a kustomization, its comment
// included: kustomize honours it only in the kustomization it builds, so an
// overlay of config/default repeats it to apply the fences before the
// Deployments.
func SortOptions(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return "", err
	}
	text := string(data)
	i := strings.Index(text, "\nsortOptions:")
	if i < 0 {
		return "", fmt.Errorf("%s/kustomization.yaml has no sortOptions", dir)
	}
	// The block's comment is the paragraph above it.
	if j := strings.LastIndex(text[:i], "\n\n"); j >= 0 {
		i = j + 1
	}
	return text[i:], nil
}
