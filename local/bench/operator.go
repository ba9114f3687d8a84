package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/internal/benchkit"
	"github.com/petri-dev/petri/local/internal/supervise"
)

// operator is petri-operator running as its own process, as its
// ServiceAccount, so that /proc tells its memory and CPU apart from the
// control plane's and the benchmark's. It is supervised as a kubelet runs
// it: a run that exits unasked (a leader that lost its Lease) is started
// again after a back-off, logged and counted (restarts).
type operator struct {
	sup        *supervise.Process
	metricsURL string
	pprofURL   string
	logPath    string
	startCPU   time.Duration
}

// startOperator starts petri-operator with the production flags of
// config/manager, deployerImage as its deployer image (NoopDeployerImage
// for no-op mode) and concurrency environments reconciled at once (the
// default when zero), with extra flags after those.
func (e *env) startOperator(ctx context.Context, name, deployerImage string, concurrency int, extra ...string) (*operator, error) {
	if err := e.setDeployerImage(ctx, deployerImage); err != nil {
		return nil, err
	}
	kubeconfig, err := e.cluster.WriteServiceAccountKubeconfig(ctx, managementNamespace, "petri-operator")
	if err != nil {
		return nil, err
	}
	ports, err := benchkit.FreePorts(3)
	if err != nil {
		return nil, err
	}
	o := &operator{
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]),
		pprofURL:   fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", ports[2]),
		logPath:    filepath.Join(e.dir, "operator-"+name+".log"),
	}
	args := []string{
		"--management-namespace=" + managementNamespace,
		"--shared-namespace=" + sharedNamespace,
		"--deployer-image=" + deployerImage,
		"--leader-elect",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", ports[2]),
		"--zap-encoder=json",
	}
	if concurrency > 0 {
		args = append(args, fmt.Sprintf("--concurrency=%d", concurrency))
	}
	if deployerImage == NoopDeployerImage {
		// The no-op deployer's Jobs request what its process uses (it
		// exits at once), not the real deployer's 100m and 128Mi: the node
		// places pods by their requests, and no-op mode measures the
		// operator, not how many deploy Jobs two cores hold at once.
		args = append(args, "--job-cpu-request=10m", "--job-memory-request=16Mi")
	}
	args = append(args, extra...)
	// GOMEMLIMIT as the operator's Deployment sets it (config/manager).
	o.sup, err = supervise.Start(supervise.Options{
		Name: "petri-operator", Path: e.bins["petri-operator"], Args: args,
		Env:     []string{"KUBECONFIG=" + kubeconfig, "GOMEMLIMIT=200MiB"},
		LogPath: o.logPath, Logf: e.log,
	})
	if err != nil {
		return nil, err
	}

	// Ready once its metrics answer and it holds the lease (a fresh
	// operator after a stopped one that released it).
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])
	deadline := time.Now().Add(90 * time.Second)
	for {
		if resp, err := http.Get(readyz); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if o.leading() {
					break
				}
			}
		}
		select {
		case <-o.sup.FirstExit():
			o.stop()
			return nil, fmt.Errorf("petri-operator exited at start; see %s", o.logPath)
		case <-ctx.Done():
			o.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			o.stop()
			return nil, fmt.Errorf("petri-operator not ready and leading within 90s; see %s", o.logPath)
		}
	}
	o.startCPU, _ = o.cpu()
	return o, nil
}

// leading reports whether the operator's metrics say it holds the lease.
func (o *operator) leading() bool {
	m, err := o.metrics()
	if err != nil {
		return false
	}
	for k, v := range m {
		if strings.HasPrefix(k, "leader_election_master_status") && v > 0 {
			return true
		}
	}
	return false
}

// stop ends the operator with SIGTERM (it releases its lease) and waits;
// it is not started again.
func (o *operator) stop() { o.sup.Stop() }

// restarts counts the runs started again after an unexpected exit.
func (o *operator) restarts() int { return o.sup.Restarts() }

// rss is the process's resident set now (VmRSS); 0 while it waits to be
// started again.
func (o *operator) rss() (int64, error) {
	pid, running := o.sup.Pid()
	if !running {
		return 0, nil
	}
	return benchkit.ProcStatusBytes(pid, "VmRSS:")
}

// cpu is the CPU time (user and system) every run has used so far.
func (o *operator) cpu() (time.Duration, error) {
	past, _ := o.sup.Past()
	pid, running := o.sup.Pid()
	if !running {
		return past, nil
	}
	cur, err := benchkit.ProcCPU(pid, false)
	return past + cur, err
}

// peakRSS is the resident set high-water mark (VmHWM) of any run.
func (o *operator) peakRSS() (int64, error) {
	_, past := o.sup.Past()
	pid, running := o.sup.Pid()
	if !running {
		return past, nil
	}
	cur, err := benchkit.ProcStatusBytes(pid, "VmHWM:")
	return max(past, cur), err
}

// metrics scrapes the operator's metrics endpoint into "name{labels}" ->
// value (labels as the endpoint writes them, sorted by name).
func (o *operator) metrics() (map[string]float64, error) {
	resp, err := http.Get(o.metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return controlplane.ParseMetrics(resp.Body)
}

var (
	verbLabel     = regexp.MustCompile(`[{,]verb="([^"]*)"`)
	resourceLabel = regexp.MustCompile(`[{,]resource="([^"]*)"`)
)

// apiRequests reads petri_api_requests_total by verb and resource.
func (o *operator) apiRequests() (map[[2]string]float64, error) {
	m, err := o.metrics()
	if err != nil {
		return nil, err
	}
	out := map[[2]string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "petri_api_requests_total{") {
			continue
		}
		verb, resource := verbLabel.FindStringSubmatch(k), resourceLabel.FindStringSubmatch(k)
		if verb != nil && resource != nil {
			out[[2]string{verb[1], resource[1]}] = v
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the operator's metrics have no petri_api_requests_total")
	}
	return out, nil
}

// sampleQueue reads the environment controller's work queue depth every
// five seconds (a scrape costs the operator a list of its environments)
// until ctx ends and returns the largest.
func (o *operator) sampleQueue(ctx context.Context) float64 {
	peak := 0.0
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		if m, err := o.metrics(); err == nil {
			peak = max(peak, metricSum(m, "workqueue_depth", `name="ephemeralenvironment"`))
		}
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
		}
	}
}

// profileCPU records the operator's CPU profile for d into path.
func (o *operator) profileCPU(ctx context.Context, d time.Duration, path string) error {
	return fetch(ctx, fmt.Sprintf("%s/profile?seconds=%d", o.pprofURL, int(d.Seconds())), path)
}

// profileHeap writes the operator's heap profile into path.
func (o *operator) profileHeap(ctx context.Context, path string) error {
	return fetch(ctx, o.pprofURL+"/heap", path)
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
