package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// Images the local node of the benchmarks knows.
const (
	// DeployerImage is played by the real petri-deployer, carrying
	// examples/charts under /charts.
	DeployerImage = "petri.dev/deployer:bench"
	// NoopDeployerImage is played by local/bench/cmd/noop-deployer: every
	// Job completes at once and says "NoOp" in its termination message. An
	// operator started with it as its deployer image runs in no-op mode.
	NoopDeployerImage = "petri.dev/deployer-noop:bench"
	// imageCharts is where the deployer image carries the charts.
	imageCharts = "/charts"
)

// Namespaces of the installation, as config/default names them.
const (
	managementNamespace = benchkit.ManagementNamespace
	sharedNamespace     = benchkit.SharedNamespace
)

// env is the control plane the benchmarks run against, with Petri's
// namespaces, RBAC and admission fences installed from config/ and the
// binaries built from this checkout.
type env struct {
	cluster *controlplane.Cluster
	bins    map[string]string
	root    string
	dir     string
	log     func(format string, args ...any)
}

// buildBinaries builds the operator, the deployer and the no-op deployer
// from this checkout into dir/bin.
func buildBinaries(dir string) (map[string]string, error) {
	return controlplane.Build(filepath.Join(dir, "bin"), "./cmd/petri-operator", "./cmd/petri-deployer", "./local/bench/cmd/noop-deployer")
}

// startEnv starts a control plane in dir/cluster whose local node plays the
// deployer images with bins, and installs Petri's configuration; the
// operator is bins["petri-operator"].
func startEnv(ctx context.Context, dir string, bins map[string]string, logf func(string, ...any)) (_ *env, err error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	logf("starting the local control plane")
	if err := os.MkdirAll(filepath.Join(dir, "cluster"), 0o755); err != nil {
		return nil, err
	}
	c, err := controlplane.Start(controlplane.Options{
		Dir: filepath.Join(dir, "cluster"),
		Images: map[string]string{
			benchkit.ImageName(DeployerImage):     bins["petri-deployer"],
			benchkit.ImageName(NoopDeployerImage): bins["noop-deployer"],
		},
		ImageFiles: map[string]map[string]string{benchkit.ImageName(DeployerImage): {imageCharts: filepath.Join(root, "examples", "charts")}},
	})
	if err != nil {
		return nil, err
	}
	e := &env{cluster: c, bins: bins, root: root, dir: dir, log: logf}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := e.install(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *env) stop() { e.cluster.Stop() }

// install applies what config/default installs apart from the Deployments
// (the benchmarks start the operator themselves): the namespaces, the
// operator's ServiceAccount and RBAC, the admission fences with their
// settings and the FlowSchemas.
func (e *env) install(ctx context.Context) error {
	files, err := benchkit.ConfigFiles(e.root)
	if err != nil {
		return err
	}
	if err := e.cluster.Apply(ctx, files...); err != nil {
		return fmt.Errorf("install Petri's namespaces, RBAC, fences and FlowSchemas: %w", err)
	}
	return e.setDeployerImage(ctx, DeployerImage)
}

// setDeployerImage writes the ConfigMap petri-operator that the operator and
// the fences share.
func (e *env) setDeployerImage(ctx context.Context, image string) error {
	return benchkit.SetDeployerImage(ctx, e.cluster, "petri-bench", image)
}
