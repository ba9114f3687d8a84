package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/node"
)

// manifests starts the GitHub stand-in, makes the config repository and
// the install overlay, and builds Petri's manifests; it returns the images
// the local node plays (the installation's, the example application's and
// Options.Images) and the deployer image.
func (s *Stack) manifests(ctx context.Context, r *Report) (map[string]string, string, error) {
	opts := s.opts
	step := r.Begin("Petri's manifests: " + map[string]string{InstallKustomize: "kubectl kustomize", InstallChart: "helm template charts/petri"}[opts.Install])
	s.token = randomHex(20)
	s.GitHub = githubapi.New(githubapi.Options{Tokens: []string{s.token}, Address: s.hostAddress()})
	s.WebhookSecret = []byte(randomHex(32))
	s.ConfigRepo = filepath.Join(opts.Dir, "config-repo")
	if err := s.makeConfigRepo(); err != nil {
		return nil, "", step.Fail(err)
	}
	if err := s.serveConfigRepo(); err != nil {
		return nil, "", step.Fail(err)
	}
	if err := s.writeOverlay(); err != nil {
		return nil, "", step.Fail(err)
	}
	var objs []*unstructured.Unstructured
	var err error
	if opts.Install == InstallChart {
		objs, err = s.renderChart()
	} else {
		var manifests string
		if manifests, err = s.kubectl(ctx, "kustomize", s.Overlay); err == nil {
			objs, err = decodeManifests([]byte(manifests))
		}
	}
	if err != nil {
		return nil, "", step.Fail(err)
	}
	images, deployerImage, err := s.images(objs)
	if err != nil {
		return nil, "", step.Fail(err)
	}
	for image, bin := range opts.Images {
		images[image] = bin
	}
	step.Done(fmt.Sprintf("%d objects", len(objs)))
	rel, _ := filepath.Rel(s.root, opts.ConfigSource)
	r.Event("config repository: %s (git, made from %s), read at %s", s.ConfigRepo, rel, s.ConfigRepoURL)
	r.Event("GitHub API stand-in: %s", s.GitHub.URL)
	return images, deployerImage, nil
}

// install installs Petri: kubectl apply -k of the overlay, or helm install
// of charts/petri.
func (s *Stack) install(ctx context.Context, r *Report) error {
	var step *Step
	var out string
	var err error
	if s.RealNode != nil {
		return s.installAsDocumented(ctx, r)
	}
	if s.opts.Install == InstallChart {
		step = r.Begin("Install Petri: helm install " + ChartRelease + " charts/petri (+ this machine's values)")
		out, err = s.installChart(ctx)
	} else {
		step = r.Begin("Install Petri: kubectl apply -k config/default (+ this machine's settings)")
		out, err = s.kubectl(ctx, "apply", "-k", s.Overlay)
	}
	if err != nil {
		return step.Fail(err)
	}
	step.Done(fmt.Sprintf("%d objects", strings.Count(strings.TrimSpace(out), "\n")+1))
	r.Detail(out)
	return nil
}

// kubectl runs the bundled kubectl as the cluster administrator.
func (s *Stack) kubectl(ctx context.Context, args ...string) (string, error) {
	return s.kubectlOn(ctx, s.Cluster.Kubeconfig, args...)
}

// kubectlOn runs the bundled kubectl with a kubeconfig (a workload
// cluster's administrator).
func (s *Stack) kubectlOn(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.opts.Binaries[BinKubectl], append([]string{"--kubeconfig", kubeconfig}, args...)...)
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

// imageName is the local node's name of an image (its key in
// node.Options.Images).
func imageName(image string) string { return node.ImageName(image) }

// webhookIngress is the overlay's Ingress of sync (%s: its namespace).
const webhookIngress = `# GitHub's webhooks, the read API and the web page (/ and /ui/) reach
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
`

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
	var patches, secretFiles string
	forgeFiles := map[string]string{}
	patches, forgeFiles = s.forgeOverlay()
	for _, name := range slices.Sorted(maps.Keys(forgeFiles)) {
		secretFiles += "      - " + name + "\n"
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
      - config-repo=%s
      - github-api-url=%s
  # The example shared workload provisions with the example application.
  - name: petri-operator
    namespace: %s
    behavior: merge
    literals:
      - "step-images=%s"%s
secretGenerator:
  - name: petri-sync
    namespace: %s
    options:
      disableNameSuffixHash: true
    files:
      - webhook-secret
      - github-token
%s%s%s%s`, base, SyncNamespace, s.ConfigRepoURL, s.GitHub.URL, ManagementNamespace, strings.Join(s.stepImages(), ","), s.overlayOperatorSettings(), SyncNamespace, secretFiles, patches, s.overlayImages(), order),
		"webhook-ingress.yaml": fmt.Sprintf(webhookIngress, SyncNamespace),
		"webhook-secret":       string(s.WebhookSecret),
		"github-token":         s.token,
	}
	for name, data := range forgeFiles {
		files[name] = data
	}
	if s.RealNode != nil {
		// The Secret is made by the command docs/install.md gives.
		k := files["kustomization.yaml"]
		i, j := strings.Index(k, "secretGenerator:\n"), strings.Index(k, "      - github-token\n")
		files["kustomization.yaml"] = k[:i] + k[j+len("      - github-token\n"):]
	}
	for name, data := range files {
		mode := os.FileMode(0o644)
		if _, secret := forgeFiles[name]; secret || name == "webhook-secret" || name == "github-token" {
			mode = 0o600
		}
		if err := os.WriteFile(filepath.Join(s.Overlay, name), []byte(data), mode); err != nil {
			return err
		}
	}
	return nil
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
