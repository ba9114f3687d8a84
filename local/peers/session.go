package peers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// session is both systems running, with what follows them.
type session struct {
	c               *controlplane.Cluster
	gh              *githubapi.Server
	petri           *petri
	argo            *argoCD
	petriGH, argoGH *githubCounter
	petriT, argoT   *tracker
	acct            string
	secret          []byte
	timeout         time.Duration
	logf            func(string, ...any)
	dir             string

	namesMu sync.Mutex
	names   map[string]int
}

// usageSample is the CPU time and peak memory of each system's processes.
type usageSample struct {
	cpu      map[string]time.Duration
	peak     map[string]int64
	restarts map[string]int
	jobs     jobUsage
}

func (s *session) sample() usageSample {
	u := usageSample{cpu: map[string]time.Duration{}, peak: map[string]int64{}, restarts: map[string]int{}}
	for _, p := range append(s.petri.procs(), s.argo.procs...) {
		if cpu, peak, err := p.usage(); err == nil {
			u.cpu[p.name], u.peak[p.name] = cpu, peak
		}
		u.restarts[p.name] = p.restarts()
	}
	u.jobs, _ = readCounted(s.acct)
	return u
}

// size plays N pull requests' lives on both systems at once.
func (s *session) size(ctx context.Context, numbers []int) (SizeResult, error) {
	res := SizeResult{PullRequests: len(numbers)}
	pr := SystemResult{System: SystemPetri, Latency: map[string]Dist{}, All: map[string]time.Duration{}, Missing: map[string]int{}}
	ar := SystemResult{System: SystemArgoCD, Latency: map[string]Dist{}, All: map[string]time.Duration{}, Missing: map[string]int{}}
	s.nameNumbers(numbers)
	for _, p := range append(s.petri.procs(), s.argo.procs...) {
		_ = p.resetPeak()
	}
	before := s.sample()
	apiBefore, err := s.c.APIServerMetrics(ctx)
	if err != nil {
		return res, err
	}
	ghPetri, ghArgo := s.petriGH.snapshot(), s.argoGH.snapshot()
	targets := []target{{SystemPetri, s.petri.webhookURL, s.secret}, {SystemArgoCD, s.argo.webhookURL, s.secret}}

	var errs []string
	for _, phase := range []string{PhaseOpen, PhasePush, PhaseClose} {
		shas := map[int]string{}
		for _, n := range numbers {
			switch phase {
			case PhaseOpen:
				shas[n] = s.gh.OpenPullRequest(repository, githubapi.PullRequest{Number: n, Labels: []string{label}}).HeadSHA
			case PhasePush:
				shas[n] = s.gh.UpdatePullRequest(repository, n, func(p *githubapi.PullRequest) {
					p.HeadSHA = githubapi.SHA(fmt.Sprintf("push %d", n))
				}).HeadSHA
			case PhaseClose:
				s.gh.UpdatePullRequest(repository, n, func(p *githubapi.PullRequest) { p.State = "closed" })
			}
		}
		action := map[string]string{PhaseOpen: "opened", PhasePush: "synchronize", PhaseClose: "closed"}[phase]
		start := time.Now()
		for _, t := range []*tracker{s.petriT, s.argoT} {
			for _, n := range numbers {
				t.expect(n, shas[n], phase == PhaseClose, start)
			}
		}
		if err := benchkit.ForEach(ctx, numbers, 16, func(n int) error {
			d, err := s.gh.PullRequestEvent(repository, n, action)
			if err != nil {
				return err
			}
			if d.Body, err = WithAPIURL(d.Body, s.argoGH.URL, repository); err != nil {
				return err
			}
			sent := time.Now()
			s.petriT.setStart(n, sent)
			s.argoT.setStart(n, sent)
			return deliver(ctx, d, targets)
		}); err != nil {
			return res, fmt.Errorf("%s webhooks: %w", phase, err)
		}
		var wg sync.WaitGroup
		for _, sys := range []struct {
			r *SystemResult
			t *tracker
		}{{&pr, s.petriT}, {&ar, s.argoT}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				took, last, missing, err := sys.t.wait(ctx, numbers, s.timeout)
				sys.r.Latency[phase] = benchkit.DistOf(took)
				if !last.IsZero() {
					sys.r.All[phase] = last.Sub(start)
				}
				sys.r.Missing[phase] = missing
				if err != nil {
					msg := fmt.Sprintf("%s %s: %v (%s)", sys.r.System, phase, err, sys.t.describe(numbers))
					sys.r.Error = strings.TrimPrefix(sys.r.Error+"; "+msg, "; ")
				}
			}()
		}
		wg.Wait()
		s.logf("%d %s: Petri all in %.1f s (p50 %.1f s), Argo CD all in %.1f s (p50 %.1f s)", len(numbers), phase,
			pr.All[phase].Seconds(), pr.Latency[phase].Median.Seconds(), ar.All[phase].Seconds(), ar.Latency[phase].Median.Seconds())
		if pr.Error != "" || ar.Error != "" {
			errs = append(errs, strings.TrimPrefix(pr.Error+"; "+ar.Error, "; "))
			break
		}
	}

	after := s.sample()
	apiAfter, err := s.c.APIServerMetrics(ctx)
	if err != nil {
		return res, err
	}
	n := float64(len(numbers))
	pr.APIRequests = requestsOf(apiBefore, apiAfter, PetriFlowSchemas) / n
	ar.APIRequests = requestsOf(apiBefore, apiAfter, ArgoCDFlowSchemas) / n
	for _, sys := range []struct {
		r      *SystemResult
		procs  []*process
		gh     *githubCounter
		before map[string]int
	}{{&pr, s.petri.procs(), s.petriGH, ghPetri}, {&ar, s.argo.procs, s.argoGH, ghArgo}} {
		sys.r.CPU, sys.r.PeakRSS, sys.r.Restarts = map[string]time.Duration{}, map[string]int64{}, map[string]int{}
		for _, p := range sys.procs {
			sys.r.CPU[p.name] = after.cpu[p.name] - before.cpu[p.name]
			sys.r.PeakRSS[p.name] = after.peak[p.name]
			if n := after.restarts[p.name] - before.restarts[p.name]; n > 0 {
				sys.r.Restarts[p.name] = n
			}
		}
		d := diffCounts(sys.before, sys.gh.snapshot())
		sys.r.GitHubRequests = float64(total(d)) / n
		sys.r.GitHubByShape = map[string]float64{}
		for k, v := range d {
			sys.r.GitHubByShape[k] = float64(v) / n
		}
		sys.r.GitHubWrites = contentGenerating(sys.r.GitHubByShape)
	}
	jobs := after.jobs.since(before.jobs)
	pr.CPU["petri-deployer Jobs"] = jobs.CPU
	pr.PeakRSS["petri-deployer Jobs"] = jobs.PeakRSS
	pr.NamespacesLeft, ar.NamespacesLeft = s.namespacesLeft(ctx, numbers)
	res.Systems = []SystemResult{pr, ar}
	if len(errs) > 0 {
		return res, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return res, nil
}

// namespacesLeft counts the pull requests' namespaces still there, of each
// system (Petri's by the label it puts on them; Argo CD's by name).
func (s *session) namespacesLeft(ctx context.Context, numbers []int) (petriLeft, argoLeft int) {
	list, err := s.c.Clientset.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return -1, -1
	}
	names := map[string]bool{}
	for _, ns := range list.Items {
		names[ns.Name] = true
		for env := range s.names {
			if strings.HasPrefix(ns.Name, env) {
				petriLeft++
			}
		}
	}
	for _, n := range numbers {
		if names[ArgoCDNamespaceOf(n)] {
			argoLeft++
		}
	}
	return petriLeft, argoLeft
}
