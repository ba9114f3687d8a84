// Package peers measures Petri beside a peer on the same local control
// plane and process node (make bench-peers): Argo CD's ApplicationSet
// controller with the pull-request generator, its application controller,
// repo-server and Redis, configured for pull-request previews as its
// documentation recommends, and Petri's operator and sync, configured for
// the same pull requests of the same repository, the same chart from the
// same Helm repository and the same values.
//
// The GitHub stand-in (local/githubapi) holds the pull requests and signs
// the webhooks; each delivery goes to both systems at the same moment.
// Each system reads the stand-in through a counting proxy of its own, so
// its GitHub requests are counted apart. Every program of both systems is
// a process of this machine whose CPU time and peak memory /proc gives;
// Petri's deploy Jobs' processes are counted by RunCounted, since they
// live too briefly to be read. kube-apiserver's own metrics tell the
// systems' requests apart by FlowSchema (apiserver_flowcontrol_dispatched_requests_total).
package peers

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/internal/benchkit"
	"github.com/petri-dev/petri/sync/render"
)

// Systems measured, in the order of the tables.
const (
	SystemPetri  = "Petri"
	SystemArgoCD = "Argo CD"
)

// Phases of a pull request's life measured.
const (
	PhaseOpen  = "opened"
	PhasePush  = "pushed"
	PhaseClose = "closed"
)

// Options size the measurement.
type Options struct {
	// Bin holds argocd, helm and argocd-manifests (make bench-peers puts
	// them there).
	Bin string
	// Dir holds the control plane, the logs and the configuration; a
	// temporary directory (removed afterwards) when empty.
	Dir string
	// Sizes are the numbers of pull requests opened at once.
	Sizes []int
	// Timeout bounds each phase of each size.
	Timeout time.Duration
	// Log receives progress lines; discarded when nil.
	Log io.Writer
}

// Defaults are make bench-peers' sizes.
func Defaults() Options { return Options{Sizes: []int{10, 100}, Timeout: 15 * time.Minute} }

// Results are the figures of one run.
type Results struct {
	Machine Machine
	Setup   Setup
	Sizes   []SizeResult
	Took    time.Duration
}

// Machine is where the figures were taken.
type Machine struct {
	CPUs        int
	GoVersion   string
	Date        time.Time
	LoadAverage string
}

// SizeResult is one size: N pull requests opened, pushed and closed.
type SizeResult struct {
	PullRequests int
	Systems      []SystemResult
}

// SystemResult is one system's figures of one size.
type SystemResult struct {
	System string
	// Latency is from a phase's webhook to the environment healthy at its
	// commit (opened, pushed) or gone (closed), by phase.
	Latency map[string]Dist
	// All is from the first webhook of a phase to the last environment
	// reaching it, by phase.
	All map[string]time.Duration
	// Missing counts environments that did not reach a phase in time.
	Missing map[string]int
	// CPU is the CPU time of the system's processes over the three
	// phases, by process, and PeakRSS their peak memory, by process.
	CPU     map[string]time.Duration
	PeakRSS map[string]int64
	// Restarts counts, by process, the times it exited unasked during the
	// size and was started again, as a kubelet would (a leader that lost
	// its Lease exits); none is the run as it should be.
	Restarts map[string]int
	// APIRequests is kube-apiserver's requests of the system's own
	// identities per environment over the three phases.
	APIRequests float64
	// GitHubRequests is the system's GitHub API requests per pull request
	// over the three phases, and GitHubByShape the same by request.
	GitHubRequests float64
	GitHubByShape  map[string]float64
	// GitHubWrites is the content-generating ones (POST, PATCH, PUT,
	// DELETE) among them, per pull request: what GitHub's secondary rate
	// limits count (80 a minute, 500 an hour per identity).
	GitHubWrites float64
	// NamespacesLeft counts the pull requests' namespaces still there at
	// the end.
	NamespacesLeft int
	Error          string
}

const (
	petriToken = "ghp_petripeers"
	argoToken  = "ghp_argocdpeers"
	repository = "petri-dev/hello"
	label      = "preview"
)

// Run starts the control plane, both systems, and measures every size.
func Run(ctx context.Context, o Options) (*Results, error) {
	start := time.Now()
	logf := benchkit.Logger(o.Log)
	dir, done, err := benchkit.WorkDir(o.Dir, "petri-bench-peers-")
	if err != nil {
		return nil, err
	}
	defer done()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	res := &Results{Machine: Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Date: time.Now().UTC(), LoadAverage: benchkit.LoadAverage()}}
	logf("building petri-operator, petri-sync, petri-deployer and the example application")
	bins, err := controlplane.Build(filepath.Join(dir, "bin"), "./cmd/petri-operator", "./cmd/petri-sync", "./cmd/petri-deployer", "./examples/app")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	acct := filepath.Join(dir, "deployer-usage")
	deployer := filepath.Join(dir, "bin", "petri-deployer-counted")
	if err := writeCountedScript(deployer, self, bins["petri-deployer"], acct); err != nil {
		return nil, err
	}

	charts, err := serveChartRepo(filepath.Join(dir, "charts"), filepath.Join(root, "examples", "charts", "example-app"))
	if err != nil {
		return nil, err
	}
	defer charts.close()
	gh := githubapi.New(githubapi.Options{Tokens: []string{petriToken, argoToken}, PathPrefix: "/api/v3", RateLimit: 1_000_000})
	defer gh.Close()
	petriGH, err := newGitHubCounter(gh.URL)
	if err != nil {
		return nil, err
	}
	defer petriGH.close()
	argoGH, err := newGitHubCounter(gh.URL)
	if err != nil {
		return nil, err
	}
	defer argoGH.close()
	setup := Setup{
		Repository: repository, Label: label,
		ChartRepository: charts.URL, Chart: "example-app", ChartVersion: "0.1.0",
		APIURL: argoGH.URL, SyncAPIURL: petriGH.URL + "/api/v3/",
		RequeueAfterSeconds: 1800,
	}
	res.Setup = setup

	logf("starting the local control plane")
	if err := os.MkdirAll(filepath.Join(dir, "cluster"), 0o755); err != nil {
		return nil, err
	}
	c, err := controlplane.Start(controlplane.Options{
		Dir: filepath.Join(dir, "cluster"),
		Images: map[string]string{
			benchkit.ImageName(DeployerImage): deployer,
			ExampleAppImage:                   bins["app"],
		},
	})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	setup.Cluster = c.Config.Host
	res.Setup = setup
	if err := installPetri(ctx, c, root); err != nil {
		return res, err
	}
	if err := applyYAML(ctx, c, dir, "flowschemas.yaml", FlowSchemasYAML(managementNamespace)); err != nil {
		return res, err
	}
	webhookSecret := "peers-" + githubapi.SHA(time.Now().String())[:20]
	p, err := startPetri(ctx, c, bins, dir, setup, charts.CA, webhookSecret, petriToken, logf)
	if err != nil {
		return res, err
	}
	defer p.stop()
	a, err := startArgoCD(ctx, c, o.Bin, dir, setup, charts.CA, webhookSecret, argoToken, logf)
	if err != nil {
		return res, err
	}
	defer a.stop()

	s := &session{c: c, gh: gh, petri: p, argo: a, petriGH: petriGH, argoGH: argoGH, acct: acct, secret: []byte(webhookSecret), timeout: o.Timeout, logf: logf, dir: dir}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.petriT, s.argoT = newTracker(), newTracker()
	<-trackPetri(wctx, c.Client, managementNamespace, s.petriNumber, s.petriT)
	<-trackArgoCD(wctx, c.Client, s.argoT)

	// One pull request's life on both first, not counted: the first
	// environment of each system fills caches (the chart index, informers,
	// the API server's discovery of the CRDs applied a moment ago).
	logf("warm-up: one pull request opened, pushed, closed")
	if _, err := s.size(ctx, []int{1000}); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	next := 1
	for _, n := range o.Sizes {
		logf("%d pull requests: opened, pushed, closed", n)
		numbers := make([]int, n)
		for i := range numbers {
			numbers[i] = next
			next++
		}
		sr, err := s.size(ctx, numbers)
		res.Sizes = append(res.Sizes, sr)
		if err != nil {
			return res, fmt.Errorf("%d pull requests: %w", n, err)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// petriNumber is the pull request of a Petri environment's name.
func (s *session) petriNumber(name string) (int, bool) {
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	n, ok := s.names[name]
	return n, ok
}

func (s *session) nameNumbers(numbers []int) {
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	if s.names == nil {
		s.names = map[string]int{}
	}
	for _, n := range numbers {
		s.names[render.EnvironmentName(AppName, repository, n)] = n
	}
}

// ParseCounts reads the numbers of pull requests of a comma-separated flag
// (-sizes); an empty list is none.
func ParseCounts(s string) ([]int, error) { return benchkit.ParseCounts(s) }

// FormatCounts writes counts as ParseCounts reads them, for a flag's
// default.
func FormatCounts(v []int) string { return benchkit.FormatCounts(v) }
