package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/internal/benchkit"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/metrics"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
	"github.com/petri-dev/petri/sync/webhook"
)

const (
	syncToken  = "ghp_bench"
	syncSecret = "bench-webhook-secret"
)

// syncRig is sync's engine in this process against the control plane, the
// GitHub stand-in and a config repository with one application per
// repository, with its webhook endpoint on a loopback HTTP server.
type syncRig struct {
	gh      *githubapi.Server
	s       *syncer.Syncer
	m       *metrics.Metrics
	url     string
	ns      string
	repos   []string
	cancel  context.CancelFunc
	done    chan struct{}
	httpSrv *httptest.Server
}

func repoName(i int) string { return fmt.Sprintf("bench/repo-%02d", i) }
func appName(i int) string  { return fmt.Sprintf("app-%02d", i) }

func (e *env) startSync(ctx context.Context, name string, repos, prsPerRepo, rateLimit int) (_ *syncRig, err error) {
	ns, err := e.cluster.CreateNamespace(ctx, "bench-"+name)
	if err != nil {
		return nil, err
	}
	r := &syncRig{ns: ns, done: make(chan struct{})}
	r.gh = githubapi.New(githubapi.Options{Tokens: []string{syncToken}, RateLimit: rateLimit})
	defer func() {
		if err != nil {
			r.stop()
		}
	}()
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(syncToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	files := map[string]string{}
	for i := range repos {
		r.repos = append(r.repos, repoName(i))
		files[fmt.Sprintf("applications/%s.yaml", appName(i))] = fmt.Sprintf(`apiVersion: petri.dev/v1alpha1
kind: Application
name: %s
repository: %s
components:
  - name: web
    chart:
      repository: /charts
      name: example-app
      version: 0.1.0
    values:
      replicas: 0
    pullRequestValues:
      commit: "{{ .SHA }}"
ttl: 24h
`, appName(i), repoName(i))
		for range prsPerRepo {
			r.gh.OpenPullRequest(repoName(i), githubapi.PullRequest{})
		}
	}
	gitDir := filepath.Join(dir, "config-repo")
	if err := benchkit.CommitFiles(gitDir, files, "bench", "bench config"); err != nil {
		return nil, err
	}
	r.m = metrics.New()
	prov, err := ghprovider.New(ghprovider.Options{BaseURL: r.gh.URL, Auth: ghprovider.TokenFile(tokenFile), Observer: r.m, HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		return nil, err
	}
	src, err := configrepo.New(configrepo.Options{URL: gitDir, Branch: "main"})
	if err != nil {
		return nil, err
	}
	r.s, err = syncer.New(syncer.Options{
		RESTConfig: e.cluster.Config, Scheme: controlplane.Scheme(), Namespace: ns, Provider: prov,
		Config: src, ConfigRepository: "bench/petri-config", Metrics: r.m, Log: logr.Discard(),
		// The benchmark triggers resyncs itself.
		ConfigInterval: time.Hour, ResyncInterval: time.Hour,
	})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		_ = r.s.Start(sctx)
	}()
	r.httpSrv = httptest.NewServer(api.Handler(r.s, &webhook.Handler{Secret: []byte(syncSecret), Queue: r.s.Events(), Metrics: r.m}, r.m))
	r.url = r.httpSrv.URL + api.WebhookPath
	deadline := time.Now().Add(60 * time.Second)
	for r.s.Ready() != nil {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("sync not ready within 60s: %w", r.s.Ready())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Every pull request has its environment.
	want := repos * prsPerRepo
	for {
		var list petriv1.EphemeralEnvironmentList
		if err := e.cluster.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		if len(list.Items) >= want {
			break
		}
		if time.Now().After(deadline.Add(5 * time.Minute)) {
			return nil, fmt.Errorf("sync wrote %d of %d environments", len(list.Items), want)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return r, nil
}

func (r *syncRig) stop() {
	if r.httpSrv != nil {
		r.httpSrv.Close()
	}
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	r.gh.Close()
}

// reconciles is the number of finished repository reconciles.
func (r *syncRig) reconciles() float64 {
	fams, err := r.m.Registry.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range fams {
		if f.GetName() == "petri_sync_reconciles_total" {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// quiet waits until the stand-in saw no request for the given time (sync's
// feedback on pull requests is done).
func (r *syncRig) quiet(ctx context.Context, d, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := len(r.gh.Requests()), time.Now()
	for {
		n := len(r.gh.Requests())
		if n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) >= d {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("GitHub stand-in still busy after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SyncLoadOptions size the webhook load.
type SyncLoadOptions struct {
	// Rate is webhooks per second; Duration how long they are sent.
	Rate     int
	Duration time.Duration
	// Repos and PullRequests (per repository) are what the events spread
	// over.
	Repos, PullRequests int
	// RateLimit is the GitHub stand-in's requests per hour; GitHub's 5,000
	// when zero. At 50 events/s sync spends more than that within a
	// minute, so make bench measures sync's own latency with a limit that
	// does not bind (a GitHub Enterprise Server without rate limits) and
	// reports what each event costs.
	RateLimit int
	// Profile, when set, receives this process's CPU profile (sync's
	// engine runs in it) over the load.
	Profile string
}

// SyncLoadResult is the webhook-to-write latency under load.
type SyncLoadResult struct {
	SyncLoadOptions
	// Latency is from sending a synchronize webhook to seeing the
	// EphemeralEnvironment written with its commit (through a watch).
	Latency Dist
	Events  int
	// Superseded were overtaken by a later event for the same pull request
	// before their write was seen; Lost were never written.
	Superseded, Lost int
	// Achieved is the rate the events were sent at.
	Achieved float64
	// GitHubRequests and NotModified count the stand-in's requests during
	// the load, and RateLimited the reconciles sync held back for GitHub's
	// rate limit.
	GitHubRequests, NotModified int
	// ByKind counts the stand-in's requests by method and path, with
	// numbers and commits replaced by placeholders.
	ByKind      map[string]int
	RateLimited float64
	// Reconciles is the repository reconciles during the load, and
	// ReconcileTime their mean duration.
	Reconciles            float64
	ReconcileTime         time.Duration
	LoadBefore, LoadAfter string
}

type pendingEvent struct {
	sha   string
	start time.Time
}

// syncLoad sends synchronize webhooks at a steady rate, each for a new head
// commit of one pull request, and measures how long until each
// environment is written with it.
func (e *env) syncLoad(ctx context.Context, o SyncLoadOptions) (res SyncLoadResult, err error) {
	res.SyncLoadOptions = o
	r, err := e.startSync(ctx, "sync-load", o.Repos, o.PullRequests, o.RateLimit)
	if err != nil {
		return res, err
	}
	defer r.stop()
	if err := r.quiet(ctx, time.Second, 5*time.Minute); err != nil {
		return res, err
	}
	res.LoadBefore = benchkit.LoadAverage()

	var (
		mu        sync.Mutex
		pending   = map[string][]pendingEvent{}
		latencies []time.Duration
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	synced := make(chan struct{})
	go benchkit.WatchLoop(wctx, e.cluster.Client, func() client.ObjectList { return &petriv1.EphemeralEnvironmentList{} },
		[]client.ListOption{client.InNamespace(r.ns)}, func(typ watch.EventType, o client.Object) {
			ee, ok := o.(*petriv1.EphemeralEnvironment)
			if !ok || typ == watch.Deleted {
				return
			}
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			list := pending[ee.Name]
			for i, p := range list {
				if p.sha == ee.Spec.Source.SHA {
					latencies = append(latencies, now.Sub(p.start))
					res.Superseded += i
					pending[ee.Name] = list[i+1:]
					return
				}
			}
		}, nil, synced)
	<-synced

	if o.Profile != "" {
		f, err := os.Create(o.Profile)
		if err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return res, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	r.gh.ResetRequests()
	before := r.reconcilesBy("rate_limited")
	recBefore, recTimeBefore := r.reconciles(), r.histogramSum("petri_sync_reconcile_duration_seconds")
	interval := time.Second / time.Duration(o.Rate)
	total := int(o.Duration / interval)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var sends sync.WaitGroup
	sendErrs := make(chan error, total)
	start := time.Now()
	for k := range total {
		repo := k % o.Repos
		number := (k/o.Repos)%o.PullRequests + 1
		sha := githubapi.SHA(fmt.Sprintf("bench push %d", k))
		r.gh.UpdatePullRequest(repoName(repo), number, func(p *githubapi.PullRequest) { p.HeadSHA = sha })
		d, err := r.gh.PullRequestEvent(repoName(repo), number, "synchronize")
		if err != nil {
			return res, err
		}
		name := render.EnvironmentName(appName(repo), repoName(repo), number)
		mu.Lock()
		pending[name] = append(pending[name], pendingEvent{sha: sha, start: time.Now()})
		mu.Unlock()
		sends.Add(1)
		go func() {
			defer sends.Done()
			resp, err := d.Send(ctx, nil, r.url, []byte(syncSecret))
			if err != nil {
				sendErrs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				sendErrs <- fmt.Errorf("webhook answered %s", resp.Status)
			}
		}()
		if k < total-1 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
	}
	res.Achieved = float64(total) / time.Since(start).Seconds()
	sends.Wait()
	close(sendErrs)
	for err := range sendErrs {
		return res, fmt.Errorf("send webhook: %w", err)
	}
	// The last writes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		left := 0
		for _, l := range pending {
			left += len(l)
		}
		mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	res.Events = total
	for _, l := range pending {
		res.Lost += len(l)
	}
	res.Latency = benchkit.DistOf(latencies)
	res.ByKind = map[string]int{}
	for _, req := range r.gh.Requests() {
		res.ByKind[requestShape(req)]++
		res.GitHubRequests++
		if req.Status == http.StatusNotModified {
			res.NotModified++
		}
	}
	res.RateLimited = r.reconcilesBy("rate_limited") - before
	res.Reconciles = r.reconciles() - recBefore
	if res.Reconciles > 0 {
		res.ReconcileTime = time.Duration((r.histogramSum("petri_sync_reconcile_duration_seconds") - recTimeBefore) / res.Reconciles * float64(time.Second))
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

var (
	shaSegment    = regexp.MustCompile(`/[0-9a-f]{40}(/|$)`)
	numberSegment = regexp.MustCompile(`/[0-9]+(/|$)`)
)

// requestShape is a request's method and path with commits and numbers
// replaced, and whether it was answered 304.
func requestShape(r githubapi.Request) string {
	p := shaSegment.ReplaceAllString(r.Path, "/{sha}$1")
	p = numberSegment.ReplaceAllString(p, "/{n}$1")
	p = strings.Replace(p, "/repos/"+strings.Split(strings.TrimPrefix(p, "/repos/"), "/")[0]+"/", "/repos/{owner}/", 1)
	if i := strings.Index(p, "/repo-"); i >= 0 {
		if j := strings.Index(p[i+1:], "/"); j >= 0 {
			p = p[:i] + "/{repo}" + p[i+1+j:]
		}
	}
	s := r.Method + " " + p
	if r.Status == http.StatusNotModified {
		s += " (304)"
	}
	return s
}

// histogramSum is the sum of a histogram's observations.
func (r *syncRig) histogramSum(name string) float64 {
	fams, err := r.m.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, f := range fams {
		if f.GetName() == name {
			total := 0.0
			for _, m := range f.GetMetric() {
				total += m.GetHistogram().GetSampleSum()
			}
			return total
		}
	}
	return 0
}

// reconcilesBy is the number of reconciles with one outcome.
func (r *syncRig) reconcilesBy(result string) float64 {
	fams, err := r.m.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, f := range fams {
		if f.GetName() != "petri_sync_reconciles_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// ResyncOptions size the unchanged resync.
type ResyncOptions struct {
	Repos, PullRequests, Runs int
}

// ResyncResult is what one periodic resync costs when nothing changed.
type ResyncResult struct {
	ResyncOptions
	// Requests is the GitHub requests per resync (every repository), and
	// NotModified how many of them were answered 304; Charged are the rest
	// (they cost rate limit).
	Requests, NotModified, Charged Counts
	// Duration is how long one resync round took.
	Duration Dist
}

// Counts is a summary of counts.
type Counts struct {
	Median, Max float64
}

func countDist(v []float64) Counts {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x)
	}
	s := benchkit.DistOf(d)
	return Counts{Median: float64(s.Median), Max: float64(s.Max)}
}

// resync counts the GitHub requests of resyncs of unchanged repositories,
// once every pull request's environment is written and reported on.
func (e *env) resync(ctx context.Context, o ResyncOptions) (res ResyncResult, err error) {
	res.ResyncOptions = o
	r, err := e.startSync(ctx, "sync-resync", o.Repos, o.PullRequests, 0)
	if err != nil {
		return res, err
	}
	defer r.stop()
	if err := r.quiet(ctx, 2*time.Second, 10*time.Minute); err != nil {
		return res, err
	}
	// A first round after the start sees the listings the reports changed.
	if _, err := r.resyncRound(ctx); err != nil {
		return res, err
	}
	if err := r.quiet(ctx, time.Second, 5*time.Minute); err != nil {
		return res, err
	}
	var reqs, nm, charged []float64
	var took []time.Duration
	for range o.Runs {
		r.gh.ResetRequests()
		d, err := r.resyncRound(ctx)
		if err != nil {
			return res, err
		}
		if err := r.quiet(ctx, 300*time.Millisecond, time.Minute); err != nil {
			return res, err
		}
		all := r.gh.Requests()
		n304 := 0
		for _, q := range all {
			if q.Status == http.StatusNotModified {
				n304++
			}
		}
		reqs = append(reqs, float64(len(all)))
		nm = append(nm, float64(n304))
		charged = append(charged, float64(len(all)-n304))
		took = append(took, d)
	}
	res.Requests, res.NotModified, res.Charged = countDist(reqs), countDist(nm), countDist(charged)
	res.Duration = benchkit.DistOf(took)
	return res, nil
}

// resyncRound runs one resync and waits until every repository was
// reconciled.
func (r *syncRig) resyncRound(ctx context.Context) (time.Duration, error) {
	before := r.reconciles()
	start := time.Now()
	r.s.Resync()
	deadline := time.Now().Add(2 * time.Minute)
	for r.reconciles() < before+float64(len(r.repos)) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("resync of %d repositories not done within 2m", len(r.repos))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return time.Since(start), nil
}
