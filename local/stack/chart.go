package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"

	"github.com/petri-dev/petri/deployer"
	"github.com/petri-dev/petri/local/controlplane"
)

// Ways to install Petri; Options.Install picks one.
const (
	// InstallKustomize applies config/default with an overlay of this
	// machine's settings (kubectl apply -k), as docs/install.md tells.
	InstallKustomize = "kustomize"
	// InstallChart installs charts/petri with the Helm SDK (helm install),
	// with values carrying the same settings.
	InstallChart = "chart"
)

// Names of the chart installation.
const (
	// ChartRelease is the Helm release that installs Petri.
	ChartRelease = "petri"
	// ChartReleaseNamespace holds the release record (the chart creates
	// Petri's own namespaces).
	ChartReleaseNamespace = "default"
)

// ChartDir is charts/petri of the repository.
func ChartDir() (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "petri"), nil
}

// RenderChart renders charts/petri with values for a cluster of kubeVersion
// (e.g. "v1.37.2") the way helm template does, CRDs included, and returns
// the objects and the manifest.
func RenderChart(values map[string]any, kubeVersion string) ([]*unstructured.Unstructured, string, error) {
	return renderChart(values, kubeVersion, true)
}

// ChartModeWorkload is the chart's value mode for a workload cluster.
const ChartModeWorkload = "workload"

// RenderWorkloadChart renders charts/petri in its workload-cluster mode
// (values plus mode: workload) the way helm template --skip-crds does, as
// docs/clusters.md installs it, and returns the objects and the manifest.
func RenderWorkloadChart(values map[string]any, kubeVersion string) ([]*unstructured.Unstructured, string, error) {
	return renderChart(workloadValues(values), kubeVersion, false)
}

// workloadValues are values with mode: workload.
func workloadValues(values map[string]any) map[string]any {
	out := map[string]any{"mode": ChartModeWorkload}
	for k, v := range values {
		if k != "mode" {
			out[k] = v
		}
	}
	return out
}

func renderChart(values map[string]any, kubeVersion string, crds bool) ([]*unstructured.Unstructured, string, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, "", err
	}
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes version %q: %w", kubeVersion, err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.IncludeCRDs = true, true, crds
	install.ReleaseName, install.Namespace = ChartRelease, ChartReleaseNamespace
	install.KubeVersion = kv
	rel, err := install.Run(chrt, values)
	if err != nil {
		return nil, "", fmt.Errorf("render chart %s: %w", dir, err)
	}
	objs, err := decodeManifests([]byte(rel.Manifest))
	return objs, rel.Manifest, err
}

// chartValues are the values that install Petri here: the settings and
// credentials the kustomize overlay (writeOverlay) gives, as a user of the
// chart gives them.
func (s *Stack) chartValues() map[string]any {
	var stepImages []any
	for _, p := range s.stepImages() {
		stepImages = append(stepImages, p)
	}
	operator := map[string]any{
		// The example shared workload provisions with the example application.
		"stepImages": stepImages,
	}
	if s.opts.WorkloadPodSecurity != "" {
		operator["workloadPodSecurity"] = s.opts.WorkloadPodSecurity
	}
	values := map[string]any{
		"operator": operator,
		"sync": map[string]any{
			"configRepo": map[string]any{"url": s.ConfigRepoURL},
			"github":     map[string]any{"apiURL": s.GitHub.URL},
			"secret": map[string]any{
				"create": true,
				"data": map[string]any{
					"webhook-secret": string(s.WebhookSecret),
					"github-token":   s.token,
				},
			},
			// As the overlay's Ingress: the webhook, the read API and the web page.
			"ingress": map[string]any{"enabled": true, "api": true, "ui": true},
		},
	}
	if s.RealNode != nil {
		// The Secret is made by the command docs/install.md gives.
		delete(values["sync"].(map[string]any), "secret")
		// The images pushed to the node's registry, at the chart's appVersion.
		operator["image"] = map[string]any{"repository": s.Image("petri-operator")}
		operator["deployerImage"] = map[string]any{"repository": s.Image("petri-deployer")}
		values["sync"].(map[string]any)["image"] = map[string]any{"repository": s.Image("petri-sync")}
	}
	return values
}

// writeChartValues keeps the values beside the overlay, for a person to
// read (they hold the local credentials, like the overlay).
func (s *Stack) writeChartValues() (string, error) {
	data, err := yaml.Marshal(s.chartValues())
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.opts.Dir, "install", "values.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	header := "# Petri's installation on this machine: helm install " + ChartRelease + " charts/petri -f values.yaml\n"
	return path, os.WriteFile(path, append([]byte(header), data...), 0o600)
}

// serverVersion is the control plane's Kubernetes version.
func (s *Stack) serverVersion() (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(s.Cluster.Config)
	if err != nil {
		return "", err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("read the API server's version: %w", err)
	}
	return v.GitVersion, nil
}

// renderChart renders the chart with this machine's values.
func (s *Stack) renderChart() ([]*unstructured.Unstructured, error) {
	if _, err := s.writeChartValues(); err != nil {
		return nil, err
	}
	v, err := s.serverVersion()
	if err != nil {
		return nil, err
	}
	objs, _, err := RenderChart(s.chartValues(), v)
	return objs, err
}

// installChart installs the chart with the Helm SDK as the cluster
// administrator, as helm install does, and returns what it created.
func (s *Stack) installChart(ctx context.Context) (string, error) {
	return s.helmInstall(ctx, s.Cluster.Kubeconfig, s.chartValues(), false)
}

// helmInstall installs the chart with values into the cluster of an
// administrator's kubeconfig, without its CRDs when skipCRDs (helm install
// --skip-crds), and returns what it created.
func (s *Stack) helmInstall(ctx context.Context, kubeconfig string, values map[string]any, skipCRDs bool) (string, error) {
	dir, err := ChartDir()
	if err != nil {
		return "", err
	}
	chrt, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	cfg, err := deployer.NewActionConfig(deployer.NewRESTClientGetter(kubeconfig, ChartReleaseNamespace), ChartReleaseNamespace, logr.Discard())
	if err != nil {
		return "", err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = ChartRelease, ChartReleaseNamespace
	install.Timeout = 2 * time.Minute
	install.SkipCRDs = skipCRDs
	rel, err := install.RunWithContext(ctx, chrt, values)
	if err != nil {
		return "", fmt.Errorf("helm install %s %s: %w", ChartRelease, dir, err)
	}
	objs, err := decodeManifests([]byte(rel.Manifest))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	crds := "CRDs from charts/petri/crds"
	if skipCRDs {
		crds = "no CRDs"
	}
	fmt.Fprintf(&b, "release %s revision %d (%s), %s\n", rel.Name, rel.Version, rel.Info.Status, crds)
	for _, o := range objs {
		fmt.Fprintf(&b, "%s/%s created\n", strings.ToLower(o.GetKind()), o.GetName())
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
