package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/petri-dev/petri/deployer"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// DeployerResult is what one component's Helm operation costs: the deploy
// Job's process (petri-deployer, started fresh as a Job's pod starts it,
// with an empty temporary directory) beside the same operation through the
// deployer package in this process.
type DeployerResult struct {
	// ProcessInstall and ProcessUpgrade are the process's wall times for an
	// install and a no-op upgrade (same chart, same values).
	ProcessInstall, ProcessUpgrade Dist
	// ProcessInstallCPU and ProcessUpgradeCPU are its CPU times (user and
	// system).
	ProcessInstallCPU, ProcessUpgradeCPU Dist
	// InProcessInstall and InProcessUpgrade are the wall times of the same
	// operations in-process (chart load included), with their CPU times.
	InProcessInstall, InProcessUpgrade       Dist
	InProcessInstallCPU, InProcessUpgradeCPU Dist
	// BareInstallMachineCPU and BareInstallRequests are what one install by
	// the deploy process, run without a Job, costs the whole machine: every
	// process's CPU (the control plane's, the node's, the process's own)
	// over the installs, less the machine's idle use over as long, and
	// kube-apiserver's requests from every client, per install.
	BareInstallMachineCPU time.Duration
	BareInstallRequests   float64
	LoadBefore, LoadAfter string
}

// deployerFloor measures runs installs and no-op upgrades each way.
func (e *env) deployerFloor(ctx context.Context, runs int) (res DeployerResult, err error) {
	res.LoadBefore = benchkit.LoadAverage()
	ns, err := e.cluster.CreateNamespace(ctx, "bench-deployer")
	if err != nil {
		return res, err
	}
	dir := filepath.Join(e.dir, "deployer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	valuesFile := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(valuesFile, []byte("replicas: 0\n"), 0o644); err != nil {
		return res, err
	}
	charts := filepath.Join(e.root, "examples", "charts")
	var pInst, pUpg, pInstCPU, pUpgCPU, iInst, iUpg, iInstCPU, iUpgCPU []time.Duration
	proc := func(release string) (time.Duration, time.Duration, error) {
		return e.deployProcess(ctx, dir, ns, charts, valuesFile, release)
	}
	for i := range runs {
		release := fmt.Sprintf("proc-%03d", i)
		for step := range 2 {
			wall, cpu, err := proc(release)
			if err != nil {
				return res, err
			}
			if step == 0 {
				pInst, pInstCPU = append(pInst, wall), append(pInstCPU, cpu)
			} else {
				pUpg, pUpgCPU = append(pUpg, wall), append(pUpgCPU, cpu)
			}
		}

		release = fmt.Sprintf("inproc-%03d", i)
		for step := range 2 {
			wall, cpu, err := e.deployInProcess(ctx, ns, charts, release)
			if err != nil {
				return res, err
			}
			if step == 0 {
				iInst, iInstCPU = append(iInst, wall), append(iInstCPU, cpu)
			} else {
				iUpg, iUpgCPU = append(iUpg, wall), append(iUpgCPU, cpu)
			}
		}
	}
	res.ProcessInstall, res.ProcessUpgrade = benchkit.DistOf(pInst), benchkit.DistOf(pUpg)
	res.ProcessInstallCPU, res.ProcessUpgradeCPU = benchkit.DistOf(pInstCPU), benchkit.DistOf(pUpgCPU)
	res.InProcessInstall, res.InProcessUpgrade = benchkit.DistOf(iInst), benchkit.DistOf(iUpg)
	res.InProcessInstallCPU, res.InProcessUpgradeCPU = benchkit.DistOf(iInstCPU), benchkit.DistOf(iUpgCPU)
	if res.BareInstallMachineCPU, res.BareInstallRequests, err = e.bareInstalls(ctx, runs, proc); err != nil {
		return res, err
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

// deployProcess runs petri-deployer deploy as a deploy Job's pod starts it,
// with an empty temporary directory, and returns its wall and CPU times.
func (e *env) deployProcess(ctx context.Context, dir, ns, charts, valuesFile, release string) (time.Duration, time.Duration, error) {
	tmp, err := os.MkdirTemp(dir, "tmp-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, e.bins["petri-deployer"], "deploy",
		"--release", release, "--namespace", ns,
		"--chart-repository", charts, "--chart-name", "example-app", "--chart-version", "0.1.0",
		"--values", valuesFile, "--termination-log", filepath.Join(tmp, "termination-log"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.cluster.Kubeconfig, "TMPDIR="+tmp)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("petri-deployer deploy %s: %w\n%s", release, err, out)
	}
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// bareInstalls is the floor of a deploy Job's Helm work with no Job around
// it: runs installs by the deploy process, one after another, with the
// whole machine's CPU and kube-apiserver's requests taken over them. The
// machine's idle use (its control plane at rest) is measured just before,
// over idleWindow, and taken off.
func (e *env) bareInstalls(ctx context.Context, runs int, proc func(string) (time.Duration, time.Duration, error)) (time.Duration, float64, error) {
	if runs == 0 {
		return 0, 0, nil
	}
	const idleWindow = 3 * time.Second
	idleFrom, idleStart := sampleCPU(), time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(idleWindow):
	}
	idle := sampleCPU().since(idleFrom).total()
	idleRate := float64(idle) / float64(time.Since(idleStart))

	apiBefore, err := e.apiServerMetrics(ctx)
	if err != nil {
		return 0, 0, err
	}
	from, start := sampleCPU(), time.Now()
	for i := range runs {
		if _, _, err := proc(fmt.Sprintf("bare-%03d", i)); err != nil {
			return 0, 0, err
		}
	}
	used := sampleCPU().since(from).total() - time.Duration(idleRate*float64(time.Since(start)))
	apiAfter, err := e.apiServerMetrics(ctx)
	if err != nil {
		return 0, 0, err
	}
	var requests float64
	for _, v := range apiServerRequestsByResource(apiBefore, apiAfter, runs) {
		requests += v
	}
	return max(used, 0) / time.Duration(runs), requests, nil
}

// deployInProcess runs what petri-deployer deploy runs, with a fresh Helm
// configuration, in this process; the CPU time is this process's over the
// call (the local node in this process is idle meanwhile).
func (e *env) deployInProcess(ctx context.Context, ns, charts, release string) (time.Duration, time.Duration, error) {
	startCPU := processCPU()
	start := time.Now()
	d, err := deployer.New(deployer.NewRESTClientGetter(e.cluster.Kubeconfig, ns), ns, logr.Discard())
	if err != nil {
		return 0, 0, err
	}
	ch, err := deployer.LoadChart(ctx, deployer.ChartSource{Repository: charts, Name: "example-app", Version: "0.1.0"})
	if err != nil {
		return 0, 0, err
	}
	if _, err := d.Deploy(ctx, deployer.DeployRequest{Release: release, Chart: ch, Values: map[string]any{"replicas": 0}}); err != nil {
		return 0, 0, fmt.Errorf("deploy %s in-process: %w", release, err)
	}
	return time.Since(start), processCPU() - startCPU, nil
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
