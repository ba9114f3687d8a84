package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// Modes of the scale and overhead measurements.
const (
	ModeReal = "real deployer"
	ModeNoop = "no-op deployer"
)

// benchEnvironment is the benchmarks' environment: three components of the
// example chart (replicas 0, one Service each), a chain (db, then api) and
// a parallel branch (web).
func benchEnvironment(namespace, name string) *petriv1.EphemeralEnvironment {
	values := apiextensionsv1.JSON{Raw: []byte(`{"replicas":0}`)}
	chart := petriv1.ChartReference{Repository: imageCharts, Name: "example-app", Version: "0.1.0"}
	return &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"petri.dev/bench": "true"}},
		Spec: petriv1.EphemeralEnvironmentSpec{Components: []petriv1.Component{
			{Name: "db", Chart: chart, Values: &values},
			{Name: "api", Chart: chart, Values: &values, DependsOn: []string{"db"}},
			{Name: "web", Chart: chart, Values: &values},
		}},
	}
}

// benchComponents are benchEnvironment's components.
var benchComponents = []string{"db", "api", "web"}

// ScaleResult is one scale run: N environments created at once.
type ScaleResult struct {
	Mode         string
	Environments int
	// Created is how long the creates themselves took.
	Created time.Duration
	// AllReady is from the first create to the last environment Ready.
	AllReady time.Duration
	// AllGone is from the first delete to the last environment gone.
	AllGone time.Duration
	// NotReady and NotGone count environments that missed the timeout.
	NotReady, NotGone int
	// PeakRSS is the operator's resident set high-water mark, in bytes.
	PeakRSS int64
	// OperatorRestarts counts the times the operator exited unasked during
	// the run and was started again, as a kubelet would (a leader that
	// lost its Lease exits); its metrics count from the last start.
	OperatorRestarts int
	// CPU is the operator's CPU time over the run.
	CPU time.Duration
	// Requests is the operator's API requests per environment lifecycle
	// by verb, and ByResource the same by verb and resource.
	Requests   map[string]float64
	ByResource map[[2]string]float64
	// Reconciles is the operator's reconciles per environment, Errors the
	// ones that returned an error, ReconcileTime their mean duration and
	// MaxQueue the longest its work queue got (sampled every second).
	Reconciles, Errors float64
	ReconcileTime      time.Duration
	MaxQueue           float64
	// JobLatency is from a deploy Job's creation to its completion.
	JobLatency Dist
	// Stages is the environments' way to Ready, step by step.
	Stages Stages
	// APIServerLatency is kube-apiserver's mean request duration over the
	// run (watches excluded), and APIServerRequests its requests.
	APIServerLatency  time.Duration
	APIServerRequests float64
	// APIServerByResource is kube-apiserver's requests per environment
	// from the first create to the last Ready, from every client (the
	// operator, the Job controller, the node, the namespace's own
	// controllers), by verb and resource.
	APIServerByResource map[[2]string]float64
	// CPUToReady is the CPU time each process used from the first create
	// to the last Ready (cpuParts).
	CPUToReady cpuSample
	// NoopMessage is a termination message of a no-op Job (no-op mode).
	NoopMessage string
	LoadBefore  string
	LoadAfter   string
	Error       string
	// template is a deploy Job of a no-op run, for the floor run after it.
	template *batchv1.Job
}

// ScaleOptions configure one scale run.
type ScaleOptions struct {
	Mode         string
	Environments int
	Concurrency  int
	Timeout      time.Duration
	// ProfileDir, when set, receives the operator's CPU profile of the
	// create-to-Ready phase and a heap profile at Ready.
	ProfileDir string
}

// scale runs one scale measurement with a fresh operator process.
func (e *env) scale(ctx context.Context, o ScaleOptions) (res ScaleResult, err error) {
	res = ScaleResult{Mode: o.Mode, Environments: o.Environments, LoadBefore: benchkit.LoadAverage()}
	image := DeployerImage
	if o.Mode == ModeNoop {
		image = NoopDeployerImage
	}
	name := fmt.Sprintf("scale-%s-%d", map[string]string{ModeReal: "real", ModeNoop: "noop"}[o.Mode], o.Environments)
	op, err := e.startOperator(ctx, name, image, o.Concurrency)
	if err != nil {
		return res, err
	}
	defer op.stop()
	c := e.cluster.Client
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tracker := trackEnvironments(tctx, c, managementNamespace)
	stages := trackStages(tctx, c, managementNamespace)
	before, err := op.apiRequests()
	if err != nil {
		return res, err
	}
	opBefore, _ := op.metrics()
	apiBefore, _ := e.apiServerMetrics(ctx)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan float64, 1)
	go func() { sampled <- op.sampleQueue(sampleCtx) }()

	names := make([]string, o.Environments)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", name, i)
	}
	tracker.forget(names)
	stages.forget(names)
	var profileDone chan error
	if o.ProfileDir != "" {
		profileDone = make(chan error, 2)
		// The first minute of the create-to-Ready phase (the run waits for
		// the profile to be written).
		d := min(max(o.Timeout/2, 5*time.Second), 60*time.Second)
		go func() {
			profileDone <- op.profileCPU(ctx, d, filepath.Join(o.ProfileDir, name+".cpu.pprof"))
		}()
		go func() {
			profileDone <- e.cluster.APIServerCPUProfile(ctx, d, filepath.Join(o.ProfileDir, name+".apiserver.cpu.pprof"))
		}()
	}
	cpuBefore := sampleCPU()
	start := time.Now()
	if err := benchkit.ForEach(ctx, names, 16, func(n string) error {
		return c.Create(ctx, benchEnvironment(managementNamespace, n))
	}); err != nil {
		return res, fmt.Errorf("create environments: %w", err)
	}
	res.Created = time.Since(start)
	readyAt, missing, waitErr := tracker.waitAll(ctx, names, false, o.Timeout)
	res.AllReady = latest(readyAt).Sub(start)
	res.NotReady = missing
	if waitErr != nil {
		res.Error = waitErr.Error()
		res.AllReady = time.Since(start)
	}
	res.CPUToReady = sampleCPU().since(cpuBefore)
	if res.NotReady == 0 {
		stages.settle(ctx, names, benchComponents, false, 30*time.Second)
	}
	res.Stages = stages.stages(tracker.created(names), readyAt)
	if apiReady, err := e.apiServerMetrics(ctx); err == nil && apiBefore != nil {
		res.APIServerByResource = apiServerRequestsByResource(apiBefore, apiReady, o.Environments)
	}
	if o.ProfileDir != "" {
		_ = op.profileHeap(ctx, filepath.Join(o.ProfileDir, name+".heap.pprof"))
	}
	if o.Mode == ModeNoop {
		res.NoopMessage = e.noopMessage(ctx, names[0])
		if res.NotReady == 0 {
			// The floor run copies the operator's deploy Job.
			res.template, _ = e.deployJob(ctx, names[0], "db")
		}
	}
	res.JobLatency = e.jobLatency(ctx, name)

	start = time.Now()
	if err := benchkit.ForEach(ctx, names, 16, func(n string) error {
		err := c.Delete(ctx, &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: managementNamespace, Name: n}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}); err != nil {
		return res, fmt.Errorf("delete environments: %w", err)
	}
	goneAt, missing, waitErr := tracker.waitAll(ctx, names, true, o.Timeout)
	res.AllGone = latest(goneAt).Sub(start)
	res.NotGone = missing
	if waitErr != nil {
		if res.Error != "" {
			res.Error += "; "
		}
		res.Error += waitErr.Error()
		res.AllGone = time.Since(start)
	}
	if profileDone != nil {
		<-profileDone
		<-profileDone
	}

	after, err := op.apiRequests()
	if err != nil {
		return res, err
	}
	stopSampling()
	res.MaxQueue = <-sampled
	if opAfter, err := op.metrics(); err == nil {
		n := float64(o.Environments)
		count := metricSum(opAfter, "controller_runtime_reconcile_total", `controller="ephemeralenvironment"`) - metricSum(opBefore, "controller_runtime_reconcile_total", `controller="ephemeralenvironment"`)
		res.Reconciles = count / n
		res.Errors = (metricSum(opAfter, "controller_runtime_reconcile_errors_total", `controller="ephemeralenvironment"`) - metricSum(opBefore, "controller_runtime_reconcile_errors_total", `controller="ephemeralenvironment"`)) / n
		took := metricSum(opAfter, "controller_runtime_reconcile_time_seconds_sum", `controller="ephemeralenvironment"`) - metricSum(opBefore, "controller_runtime_reconcile_time_seconds_sum", `controller="ephemeralenvironment"`)
		if count > 0 {
			res.ReconcileTime = time.Duration(took / count * float64(time.Second))
		}
	}
	if apiAfter, err := e.apiServerMetrics(ctx); err == nil && apiBefore != nil {
		res.APIServerLatency, res.APIServerRequests = apiServerLatency(apiBefore, apiAfter)
	}
	res.Requests, res.ByResource = perEnvironment(before, after, o.Environments)
	cpu, err := op.cpu()
	if err != nil {
		return res, err
	}
	res.CPU = cpu - op.startCPU
	if res.PeakRSS, err = op.peakRSS(); err != nil {
		return res, err
	}
	res.OperatorRestarts = op.restarts()
	res.LoadAfter = benchkit.LoadAverage()
	if res.NotGone > 0 {
		// The next run starts from a clean slate: force what is left.
		e.forceDeleteAll(ctx, names)
	}
	return res, nil
}

// jobLatency is how long the deploy Jobs of a run took from creation to
// completion.
func (e *env) jobLatency(ctx context.Context, prefix string) Dist {
	var jobs batchv1.JobList
	if err := e.cluster.Client.List(ctx, &jobs, client.InNamespace(managementNamespace), client.MatchingLabels{"petri.dev/action": "deploy"}); err != nil {
		return Dist{}
	}
	var d []time.Duration
	for _, j := range jobs.Items {
		if !strings.HasPrefix(j.Labels[petriv1.LabelEnvironment], prefix) || j.Status.CompletionTime == nil {
			continue
		}
		d = append(d, j.Status.CompletionTime.Sub(j.CreationTimestamp.Time))
	}
	return benchkit.DistOf(d)
}

// metricSum adds the samples of a metric whose labels contain match
// (watches and long-running requests left out).
func metricSum(m map[string]float64, name, match string) float64 {
	total := 0.0
	for k, v := range m {
		if !strings.HasPrefix(k, name+"{") && k != name {
			continue
		}
		if strings.Contains(k, `verb="WATCH"`) || strings.Contains(k, `verb="CONNECT"`) || !strings.Contains(k, match) {
			continue
		}
		total += v
	}
	return total
}

// apiServerMetrics scrapes kube-apiserver's metrics as the administrator.
func (e *env) apiServerMetrics(ctx context.Context) (map[string]float64, error) {
	return e.cluster.APIServerMetrics(ctx)
}

// perEnvironment divides the difference of two request counts by n, by verb
// and by verb and resource.
func perEnvironment(before, after map[[2]string]float64, n int) (map[string]float64, map[[2]string]float64) {
	byVerb := map[string]float64{}
	byRes := map[[2]string]float64{}
	for k, v := range after {
		d := (v - before[k]) / float64(n)
		if d <= 0 {
			continue
		}
		byVerb[k[0]] += d
		byRes[k] = d
	}
	return byVerb, byRes
}

// noopMessage reads the termination message of a deploy Job's pod of an
// environment in no-op mode, to show what the no-op deployer reported.
func (e *env) noopMessage(ctx context.Context, envName string) string {
	var pods corev1.PodList
	if err := e.cluster.Client.List(ctx, &pods, client.InNamespace(managementNamespace), client.MatchingLabels{petriv1.LabelEnvironment: envName}); err != nil {
		return ""
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.Message != "" {
				if res, ok := contract.Decode(t.Message); ok {
					return res.Message
				}
				return t.Message
			}
		}
	}
	return ""
}

// forceDeleteAll releases environments that did not go away in time, with
// the force-delete annotation.
func (e *env) forceDeleteAll(ctx context.Context, names []string) {
	_ = benchkit.ForEach(ctx, names, 16, func(n string) error {
		ee := &petriv1.EphemeralEnvironment{}
		if err := e.cluster.Client.Get(ctx, client.ObjectKey{Namespace: managementNamespace, Name: n}, ee); err != nil {
			return nil
		}
		patch := client.MergeFrom(ee.DeepCopy())
		if ee.Annotations == nil {
			ee.Annotations = map[string]string{}
		}
		ee.Annotations[petriv1.AnnotationForceDelete] = "true"
		_ = e.cluster.Client.Patch(ctx, ee, patch)
		return nil
	})
}

func latest(times map[string]time.Time) time.Time {
	var t time.Time
	for _, at := range times {
		if at.After(t) {
			t = at
		}
	}
	return t
}
