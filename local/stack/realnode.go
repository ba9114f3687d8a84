package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/petri-dev/petri/hack/images"
	"github.com/petri-dev/petri/local/internal/githttp"
	"github.com/petri-dev/petri/local/internal/ingress"
	"github.com/petri-dev/petri/local/node"
	"github.com/petri-dev/petri/local/realnode"
)

// Nodes the stack runs pods on; Options.Node picks one.
const (
	// NodeProcess is local/node: every pod a process of this machine,
	// images mapped to binaries built here. Fast: the default, the
	// benchmarks and the chaos suite.
	NodeProcess = "process"
	// NodeReal is local/realnode: kubelet, containerd and runc, Petri's
	// images built from hack/images and pulled from the node's registry,
	// kube-proxy and CoreDNS. It needs root.
	NodeReal = "real"
)

// ImageTag is the tag the stack pushes Petri's images with on the real
// node: charts/petri's appVersion and config/default's newTag, so both
// installations name them as they are.
const ImageTag = "v0.1.0"

// exampleAppTag is the example application's tag the example shared
// workload names (examples/app/config-repo).
const exampleAppTag = "0.1.0"

// configRepoPath is the config repository's path on the real node's git
// server.
const configRepoPath = "/petri-config.git"

// startRealNode starts the real node with a registry and host routes (the
// control plane comes with it), builds Petri's and the example
// application's images from hack/images and pushes them to the registry.
func (s *Stack) startRealNode(ctx context.Context, r *Report) error {
	step := r.Begin("Real node: containerd, kubelet, kube-scheduler, kube-proxy, CoreDNS, and a registry (the control plane with it)")
	n, err := realnode.Start(ctx, realnode.Options{Dir: s.opts.Dir, Registry: true, Routes: true})
	if err != nil {
		return step.Fail(err)
	}
	s.RealNode, s.Cluster, s.Client = n, n.Cluster, n.Cluster.Client
	step.Done(fmt.Sprintf("node %s at %s, API server %s, registry %s", n.Name, n.NodeIP, s.Cluster.Config.Host, n.Registry))

	step = r.Begin("Images: hack/images builds petri-operator, petri-sync, petri-deployer and example-app; pushed to " + n.Registry)
	start := time.Now()
	var specs []images.Spec
	for _, name := range []string{"petri-operator", "petri-sync", "petri-deployer", "example-app"} {
		spec, err := images.Lookup(name)
		if err != nil {
			return step.Fail(err)
		}
		specs = append(specs, spec)
	}
	built, err := images.Build(ctx, specs, images.Options{Root: s.root, Version: ImageTag})
	if err != nil {
		return step.Fail(err)
	}
	if err := images.Push(ctx, n.Registry, ImageTag, true, built); err != nil {
		return step.Fail(err)
	}
	for _, b := range built {
		if b.Spec.Name == "example-app" {
			s.appImage = b
		}
	}
	if err := s.PushAppImage(ctx, exampleAppTag); err != nil {
		return step.Fail(err)
	}
	step.Done(fmt.Sprintf("%d images in %.1fs", len(built), time.Since(start).Seconds()))
	return nil
}

// PushAppImage pushes the example application's image with a tag, as a
// pull request's CI pushes one per commit; the real node only.
func (s *Stack) PushAppImage(ctx context.Context, tag string) error {
	if s.RealNode == nil {
		return errors.New("images are pushed on the real node only")
	}
	return images.Push(ctx, s.RealNode.Registry, tag, true, []images.Built{s.appImage})
}

// Image names an image of the installation: the node's registry's on the
// real node, the name the process node plays otherwise (name is
// petri-operator, petri-sync, petri-deployer or example-app).
func (s *Stack) Image(name string) string {
	if s.RealNode == nil {
		if name == "example-app" {
			return ExampleAppImage
		}
		return "ghcr.io/petri-dev/" + name
	}
	return s.RealNode.Registry + "/" + name
}

// hostAddress is where a server of the stack listens so that pods reach
// it: the host end of the real node's link, loopback for the process node.
func (s *Stack) hostAddress() string {
	if s.RealNode != nil {
		return net.JoinHostPort(s.RealNode.HostIP, "0")
	}
	return "127.0.0.1:0"
}

// serveConfigRepo serves the config repository over git's smart HTTP on
// the host end of the real node's link, where sync's pod clones it; the
// process node's sync reads it from disk.
func (s *Stack) serveConfigRepo() error {
	if s.RealNode == nil {
		s.ConfigRepoURL = "file://" + s.ConfigRepo
		return nil
	}
	h, err := githttp.Handler(map[string]string{configRepoPath: s.ConfigRepo})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", s.hostAddress())
	if err != nil {
		return fmt.Errorf("serve the config repository: %w", err)
	}
	s.gitServer = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.gitServer.Serve(l) }()
	s.ConfigRepoURL = "http://" + l.Addr().String() + configRepoPath
	return nil
}

// startRealIngress serves the cluster's Ingress rules on the ingress
// port, proxying to the Services' cluster IPs, which the host reaches
// through the node's routes and kube-proxy's rules.
func (s *Stack) startRealIngress() {
	s.ingress.Handler = ingress.Handler(s.Cluster.Clientset, s.ServiceAddress)
	go func() { _ = s.ingress.Serve(s.ingressListener) }()
}

// ServiceAddress is where this machine reaches a Service's port: a ready
// pod's local port on the process node; on the real node a ready endpoint
// of the Service (pod IP and port, from its EndpointSlices, as an ingress
// controller routes), which the host reaches through the node's routes.
func (s *Stack) ServiceAddress(ctx context.Context, ns, name string, port intstr.IntOrString) (string, error) {
	if s.RealNode == nil {
		return s.Node.ServiceAddress(ctx, ns, name, port)
	}
	cs := s.Cluster.Clientset
	svc, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("service %s/%s: %w", ns, name, err)
	}
	var portName string
	found := false
	for _, p := range svc.Spec.Ports {
		if port.Type == intstr.Int && p.Port == port.IntVal || port.Type == intstr.String && p.Name == port.StrVal {
			portName, found = p.Name, true
		}
	}
	if !found {
		return "", fmt.Errorf("service %s/%s has no port %s", ns, name, port.String())
	}
	slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return "", fmt.Errorf("endpoints of service %s/%s: %w", ns, name, err)
	}
	for _, sl := range slices.Items {
		for _, p := range sl.Ports {
			if p.Port == nil || p.Name == nil && portName != "" || p.Name != nil && *p.Name != portName {
				continue
			}
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready && len(ep.Addresses) > 0 {
					return net.JoinHostPort(ep.Addresses[0], fmt.Sprint(*p.Port)), nil
				}
			}
		}
	}
	return "", fmt.Errorf("service %s/%s: %w", ns, name, node.ErrNoEndpoints)
}

// valuesLine is the first values: key of a config file.
var valuesLine = regexp.MustCompile(`(?m)^( *)values:\n`)

// realNodeConfig names the node's registry in the config repository: the
// example application's image in the shared workload's steps, and as the
// image repository of the chart's values (the component's, the shared
// workload's).
func realNodeConfig(data []byte, registry string) []byte {
	data = bytes.ReplaceAll(data, []byte(ExampleAppImage+":"), []byte(registry+"/example-app:"))
	loc := valuesLine.FindSubmatchIndex(data)
	if loc == nil {
		return data
	}
	indent := string(data[loc[2]:loc[3]])
	add := indent + "  image:\n" + indent + "    repository: " + registry + "/example-app\n"
	return append(append(append([]byte{}, data[:loc[1]]...), add...), data[loc[1]:]...)
}

// overlayOperatorSettings are the overlay's literals of the ConfigMap
// petri-operator beyond step-images: workload-pod-security when
// Options.WorkloadPodSecurity is set, and deployer-image on the real node
// (config/manager's otherwise).
func (s *Stack) overlayOperatorSettings() string {
	var out string
	if s.opts.WorkloadPodSecurity != "" {
		out = "\n      - workload-pod-security=" + s.opts.WorkloadPodSecurity
	}
	if s.RealNode == nil {
		return out
	}
	return out + "\n      - deployer-image=" + s.Image("petri-deployer") + ":" + ImageTag
}

// overlayImages renames the operator's and sync's images to the node's
// registry in the overlay, as a user names the registry they pushed to.
func (s *Stack) overlayImages() string {
	if s.RealNode == nil {
		return ""
	}
	return fmt.Sprintf(`images:
  - name: ghcr.io/petri-dev/petri-operator
    newName: %s
    newTag: %s
  - name: ghcr.io/petri-dev/petri-sync
    newName: %s
    newTag: %s
`, s.Image("petri-operator"), ImageTag, s.Image("petri-sync"), ImageTag)
}

// waitServed waits, on the real node, until sync answers through the
// ingress: a Deployment is available before kube-proxy has written its
// Service's rules, and a connection opened before then is never
// translated (conntrack keeps its first, untranslated, answer), so the
// first webhook would hang.
func (s *Stack) waitServed(ctx context.Context) error {
	if s.RealNode == nil {
		return nil
	}
	var last string
	return poll(ctx, time.Minute, func() (bool, error) {
		code, _, err := httpGet(ctx, s.IngressURL+"/")
		last = fmt.Sprint(code, err)
		return err == nil && code == http.StatusOK, nil
	}, func() string { return "sync's page through the ingress: " + last })
}

// installAsDocumented installs Petri on the real node with the commands of
// docs/install.md: helm install (or, for the kustomization, kubectl create
// namespace first), sync's Secret by kubectl create secret from the
// files, then kubectl rollout status of both Deployments.
func (s *Stack) installAsDocumented(ctx context.Context, r *Report) error {
	secret := []string{"-n", SyncNamespace, "create", "secret", "generic", "petri-sync",
		"--from-file=webhook-secret=" + filepath.Join(s.Overlay, "webhook-secret"),
		"--from-file=github-token=" + filepath.Join(s.Overlay, "github-token")}
	var cmds [][]string
	var step *Step
	if s.opts.Install == InstallChart {
		step = r.Begin("Install Petri as docs/install.md does: helm install " + ChartRelease + " charts/petri -f values.yaml; kubectl create secret; kubectl rollout status")
		out, err := s.installChart(ctx)
		if err != nil {
			return step.Fail(err)
		}
		r.Detail(out)
		cmds = [][]string{secret}
	} else {
		step = r.Begin("Install Petri as docs/install.md does: kubectl create namespace; kubectl create secret; kubectl apply -k; kubectl rollout status")
		cmds = [][]string{{"create", "namespace", SyncNamespace}, secret, {"apply", "-k", s.Overlay}}
	}
	cmds = append(cmds,
		[]string{"-n", ManagementNamespace, "rollout", "status", "deploy/petri-operator", "--timeout=3m"},
		[]string{"-n", SyncNamespace, "rollout", "status", "deploy/petri-sync", "--timeout=3m"})
	for _, c := range cmds {
		out, err := s.kubectl(ctx, c...)
		if err != nil {
			return step.Fail(err)
		}
		r.Event("$ kubectl %s", strings.Join(c, " "))
		r.Detail(out)
	}
	step.Done("")
	return nil
}
