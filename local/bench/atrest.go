package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// At rest: what idle environments cost.
//
// A deployed environment that nobody touches still gets a verify Job every
// --verify-interval (10 minutes by default), and a finished Job is kept for
// --job-ttl-after-finished (24 hours) unless the operator deletes it. The
// at-rest measurement keeps N environments of three components (no-op
// deployer) for a simulated day: a short verify interval and a short Job
// TTL stand in for the production ones, so that what a day leaves behind
// piles up in minutes. It reads, over a window once the pile can grow no
// more (one interval and one TTL after the last environment was Ready), the
// Jobs, pods and Secrets kept in the management namespace, the pods
// started, kube-apiserver's requests and the operator's memory and CPU.
//
// Each operator measured gets a control plane of its own, so that nothing
// one leaves behind is counted for the other: the operator built at
// AtRestOptions.Before ("before") first, then this checkout's ("after").

// AtRestBefore is the revision make bench measures beside this checkout at
// rest: the commit before verified verify Jobs and older generations'
// values Secrets were deleted (8bc6e04, controllers/prune.go).
const AtRestBefore = "8bc6e04^"

// Sides of the at-rest measurement.
const (
	SideBefore = "before"
	SideAfter  = "after"
)

// AtRestOptions size the at-rest measurement.
type AtRestOptions struct {
	// Environments are kept idle, each of three components.
	Environments int
	// VerifyInterval and JobTTL stand in for the operator's defaults (10
	// minutes and 24 hours); their ratio is what a simulated day keeps.
	VerifyInterval time.Duration
	JobTTL         time.Duration
	// Window is how long the steady state is read.
	Window time.Duration
	// Before is a git revision whose operator is measured first, beside
	// this checkout's; none when empty.
	Before string
	// Timeout bounds the wait for all Ready.
	Timeout time.Duration
}

// Ratio is the Job TTL over the verify interval: how many verify Jobs per
// environment a TTL keeps when none is deleted early (144 in production).
func (o AtRestOptions) Ratio() float64 {
	return float64(o.JobTTL) / float64(o.VerifyInterval)
}

// AtRestResult is one operator's environments at rest.
type AtRestResult struct {
	// Side is SideBefore or SideAfter; Revision the commit measured.
	Side, Revision string
	Options        AtRestOptions
	// AllReady is from the first create to the last environment Ready.
	AllReady time.Duration
	// Jobs, Pods and Secrets are the objects in the management namespace,
	// averaged over the window's samples, and their largest counts.
	Jobs, Pods, Secrets          float64
	MaxJobs, MaxPods, MaxSecrets int
	Samples                      int
	// JobsStarted and PodsStarted are the Jobs and pods created in the
	// window (kube-apiserver's POST jobs and POST pods).
	JobsStarted, PodsStarted float64
	// Requests are kube-apiserver's requests in the window from every
	// client by verb and resource, without the benchmark's own lists and
	// without Lease and Node requests (Background), which come at the
	// same pace whatever the number of environments.
	Requests   map[[2]string]float64
	Background float64
	// OperatorRequests are the operator's own requests in the window
	// (petri_api_requests_total).
	OperatorRequests float64
	// RSS is the operator's resident set at the end of the window, PeakRSS
	// its high-water mark; CPU its CPU time in the window.
	RSS, PeakRSS int64
	CPU          time.Duration
	// Cores is the machine's CPU by process over the window.
	Cores cpuSample
	// Verified counts the environments whose releases a verify Job
	// verified (WorkloadsIntact); VerifyTook is each one's latest finished
	// verify Job, created to finished.
	Verified   int
	VerifyTook Dist
	// VerifyMessage is what the no-op deployer's verify reported.
	VerifyMessage         string
	LoadBefore, LoadAfter string
}

// atRest measures the operator built at o.Before (when set) and then this
// checkout's (bins["petri-operator"]), each on a fresh control plane.
func atRest(ctx context.Context, o AtRestOptions, dir string, bins map[string]string, logf func(string, ...any)) ([]AtRestResult, error) {
	type side struct {
		name, revision string
		bins           map[string]string
	}
	head, err := gitRevision(ctx, "HEAD")
	if err != nil {
		return nil, err
	}
	var sides []side
	if o.Before != "" {
		logf("at rest: building petri-operator at %s", o.Before)
		bin, rev, err := buildOperatorAt(ctx, o.Before, filepath.Join(dir, "atrest-build"))
		if err != nil {
			return nil, err
		}
		before := maps.Clone(bins)
		before["petri-operator"] = bin
		sides = append(sides, side{SideBefore, rev, before})
	}
	sides = append(sides, side{SideAfter, head, bins})
	var out []AtRestResult
	for _, s := range sides {
		logf("at rest, %s (%s): %d environments, verify every %s, Jobs kept %s (ratio %.0f), window %s",
			s.name, s.revision, o.Environments, o.VerifyInterval, o.JobTTL, o.Ratio(), o.Window)
		r, err := atRestSide(ctx, o, filepath.Join(dir, "atrest-"+s.name), s.bins, logf)
		r.Side, r.Revision, r.Options = s.name, s.revision, o
		out = append(out, r)
		if err != nil {
			return out, fmt.Errorf("%s (%s): %w", s.name, s.revision, err)
		}
		logf("at rest, %s: %.0f Jobs, %.0f pods, %.0f Secrets kept; %.0f pods started in %s; %.0f requests; operator RSS %d MiB",
			s.name, r.Jobs, r.Pods, r.Secrets, r.PodsStarted, o.Window, r.totalRequests(), r.RSS>>20)
	}
	return out, nil
}

// gitRevision is the short commit of a revision of this repository.
func gitRevision(ctx context.Context, rev string) (string, error) {
	out, err := runGit(ctx, "rev-parse", "--short", rev)
	return strings.TrimSpace(out), err
}

// runGit runs git in this repository.
func runGit(ctx context.Context, args ...string) (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// buildOperatorAt builds petri-operator at rev in a git worktree under dir,
// removed afterwards, and returns the binary and the short commit.
func buildOperatorAt(ctx context.Context, rev, dir string) (string, string, error) {
	commit, err := gitRevision(ctx, rev)
	if err != nil {
		return "", "", err
	}
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	if _, err := runGit(ctx, "worktree", "add", "--detach", tree, commit); err != nil {
		return "", "", err
	}
	defer func() {
		_, _ = runGit(context.WithoutCancel(ctx), "worktree", "remove", "--force", tree)
	}()
	bin := filepath.Join(dir, "bin", "petri-operator")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/petri-operator")
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build petri-operator at %s: %w\n%s", commit, err, out)
	}
	return bin, commit, nil
}

// atRestSide keeps o.Environments idle on a fresh control plane and reads
// the steady state.
func atRestSide(ctx context.Context, o AtRestOptions, dir string, bins map[string]string, logf func(string, ...any)) (res AtRestResult, err error) {
	res.LoadBefore = benchkit.LoadAverage()
	e, err := startEnv(ctx, dir, bins, logf)
	if err != nil {
		return res, err
	}
	defer e.stop()
	op, err := e.startOperator(ctx, "atrest", NoopDeployerImage, 0,
		"--verify-interval="+o.VerifyInterval.String(), "--job-ttl-after-finished="+o.JobTTL.String())
	if err != nil {
		return res, err
	}
	defer op.stop()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, res.AllReady, err = e.createReady(tctx, "atrest", o.Environments, o.Timeout); err != nil {
		return res, err
	}
	// The pile grows for one interval (the first verify Job) and one TTL
	// (the first Job deleted by it) after the last environment was Ready.
	settle := o.VerifyInterval + o.JobTTL
	logf("at rest: all %d Ready in %s; letting the simulated day settle for %s", o.Environments, secs(res.AllReady), settle)
	if err := pause(ctx, settle); err != nil {
		return res, err
	}
	if err := e.readWindow(ctx, op, o.Window, &res); err != nil {
		return res, err
	}
	if err := e.readVerifications(ctx, &res, 2*o.VerifyInterval+10*time.Second); err != nil {
		return res, err
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

// createReady creates n bench environments named prefix-NNNN and waits
// until every one is Ready; allReady is from the first create to the last
// Ready. The watch that times them lasts as long as ctx: the caller's
// measurement runs with it open, as it ran before.
func (e *env) createReady(ctx context.Context, prefix string, n int, timeout time.Duration) (names []string, allReady time.Duration, err error) {
	c := e.cluster.Client
	tracker := trackEnvironments(ctx, c, managementNamespace)
	names = make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	start := time.Now()
	if err := benchkit.ForEach(ctx, names, 16, func(n string) error {
		return c.Create(ctx, benchEnvironment(managementNamespace, n))
	}); err != nil {
		return nil, 0, fmt.Errorf("create environments: %w", err)
	}
	readyAt, _, err := tracker.waitAll(ctx, names, false, timeout)
	if err != nil {
		return nil, 0, err
	}
	return names, latest(readyAt).Sub(start), nil
}

// readWindow reads the steady state over the window: the objects kept,
// sampled, and what kube-apiserver served and the operator used.
func (e *env) readWindow(ctx context.Context, op *operator, window time.Duration, res *AtRestResult) error {
	apiBefore, err := e.apiServerMetrics(ctx)
	if err != nil {
		return err
	}
	opBefore, err := op.apiRequests()
	if err != nil {
		return err
	}
	cpuBefore, sampleBefore := op.cpuNow(), sampleCPU()
	const samples = 8
	var jobs, pods, secrets int
	for i := range samples {
		if i > 0 {
			if err := pause(ctx, window/(samples-1)); err != nil {
				return err
			}
		}
		j, p, s, err := e.countKept(ctx)
		if err != nil {
			return err
		}
		jobs, pods, secrets = jobs+j, pods+p, secrets+s
		res.MaxJobs, res.MaxPods, res.MaxSecrets = max(res.MaxJobs, j), max(res.MaxPods, p), max(res.MaxSecrets, s)
	}
	res.Samples = samples
	res.Jobs, res.Pods, res.Secrets = float64(jobs)/samples, float64(pods)/samples, float64(secrets)/samples
	res.Cores = sampleCPU().since(sampleBefore)
	res.CPU = op.cpuNow() - cpuBefore
	apiAfter, err := e.apiServerMetrics(ctx)
	if err != nil {
		return err
	}
	opAfter, err := op.apiRequests()
	if err != nil {
		return err
	}
	for k, v := range opAfter {
		res.OperatorRequests += v - opBefore[k]
	}
	all := apiServerRequestsByResource(apiBefore, apiAfter, 1)
	res.JobsStarted, res.PodsStarted = all[[2]string{"POST", "jobs"}], all[[2]string{"POST", "pods"}]
	res.Requests = map[[2]string]float64{}
	for k, v := range all {
		switch {
		case k[1] == "leases" || k[1] == "nodes" || strings.HasPrefix(k[1], "nodes/"):
			res.Background += v
		case k[1] == "":
		default:
			res.Requests[k] = v
		}
	}
	// The samples' own lists.
	for _, r := range []string{"jobs", "pods", "secrets"} {
		k := [2]string{"LIST", r}
		if res.Requests[k] -= samples; res.Requests[k] <= 0 {
			delete(res.Requests, k)
		}
	}
	if res.RSS, err = op.rss(); err != nil {
		return err
	}
	res.PeakRSS, err = op.peakRSS()
	return err
}

// countKept counts the Jobs, pods and Secrets in the management namespace
// (metadata only).
func (e *env) countKept(ctx context.Context) (jobs, pods, secrets int, err error) {
	count := func(gvk schema.GroupVersionKind) (int, error) {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk)
		if err := e.cluster.Client.List(ctx, l, client.InNamespace(managementNamespace)); err != nil {
			return 0, fmt.Errorf("list %s: %w", gvk.Kind, err)
		}
		return len(l.Items), nil
	}
	if jobs, err = count(batchv1.SchemeGroupVersion.WithKind("JobList")); err != nil {
		return
	}
	if pods, err = count(corev1.SchemeGroupVersion.WithKind("PodList")); err != nil {
		return
	}
	secrets, err = count(corev1.SchemeGroupVersion.WithKind("SecretList"))
	return
}

// readVerifications reads each environment's verification: its releases
// verified (WorkloadsIntact), how long its latest finished verify Job took,
// and what the no-op deployer's verify said. On a loaded machine every
// environment's latest verify Job may be running at the moment of reading:
// it reads again, up to wait, until one has finished. The window's figures
// are taken by then.
func (e *env) readVerifications(ctx context.Context, res *AtRestResult, wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var got AtRestResult
		e.readVerificationsOnce(ctx, &got)
		res.Verified, res.VerifyTook, res.VerifyMessage = got.Verified, got.VerifyTook, got.VerifyMessage
		if got.VerifyMessage != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
	}
}

// readVerificationsOnce reads the environments' verifications once.
func (e *env) readVerificationsOnce(ctx context.Context, res *AtRestResult) {
	var list petriv1.EphemeralEnvironmentList
	if err := e.cluster.Client.List(ctx, &list, client.InNamespace(managementNamespace)); err != nil {
		return
	}
	var took []time.Duration
	for _, ee := range list.Items {
		c := apimeta.FindStatusCondition(ee.Status.Conditions, petriv1.ConditionWorkloadsIntact)
		if c != nil && c.Status == metav1.ConditionTrue && c.Reason == petriv1.ReasonWorkloadsVerified {
			res.Verified++
		}
		v := ee.Status.Verification
		if v == nil || v.StartedAt == nil || v.FinishedAt == nil {
			continue
		}
		took = append(took, v.FinishedAt.Sub(v.StartedAt.Time))
		if strings.HasPrefix(v.Result, "NoOp: verify") {
			res.VerifyMessage = v.Result
		}
	}
	res.VerifyTook = benchkit.DistOf(took)
}

// pause waits d: a measurement window, not a synchronisation.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// cpuNow is the operator's CPU time so far, zero when unreadable.
func (o *operator) cpuNow() time.Duration {
	d, _ := o.cpu()
	return d
}

// production is the operator's defaults that the at-rest measurement's
// short interval and TTL stand in for.
var production = controllers.DefaultOptions()
