package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// ModeFloor is a scale run without the operator: the writes it makes for
// each environment issued raw by a plain client (floorCreate), all
// environments at once, the same Jobs completed by the same Job controller
// and node. It is what the machine needs for the environments' Jobs alone.
const ModeFloor = "floor: raw writes, no operator"

// scaleFloor creates n environments' worth of the floor's writes at once
// and measures until every one of them has its Jobs complete and its
// status written; then it removes them (not measured) and waits until
// their namespaces are gone. template is a deploy Job of the operator's.
// With profileDir set, kube-apiserver's CPU profile of the first part of
// the run (as long as the operator's run's) is written there.
func (e *env) scaleFloor(ctx context.Context, n int, template *batchv1.Job, timeout time.Duration, profileDir string) (res ScaleResult, err error) {
	res = ScaleResult{Mode: ModeFloor, Environments: n, LoadBefore: benchkit.LoadAverage()}
	// The operator's client is not rate-limited either (controller-runtime
	// leaves it to the API server's priority and fairness).
	cfg := rest.CopyConfig(e.cluster.Config)
	cfg.QPS = -1
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: controlplane.Scheme()})
	if err != nil {
		return res, err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, err
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := trackJobs(tctx, c, floorNamespace)
	envs := trackEnvironments(tctx, c, floorNamespace)
	stages := trackStages(tctx, c, floorNamespace)
	apiBefore, _ := e.apiServerMetrics(ctx)

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("floor-%d-%04d", n, i)
	}
	profiled := make(chan error, 1)
	if profileDir != "" {
		d := min(max(timeout/2, 5*time.Second), 60*time.Second)
		go func() {
			profiled <- e.cluster.APIServerCPUProfile(ctx, d, filepath.Join(profileDir, fmt.Sprintf("scale-floor-%d.apiserver.cpu.pprof", n)))
		}()
	} else {
		profiled <- nil
	}
	defer func() { <-profiled }()
	cpuBefore := sampleCPU()
	start := time.Now()
	var (
		mu      sync.Mutex
		last    time.Duration
		missing int
		errs    []error
		wg      sync.WaitGroup
	)
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			took, _, err := floorCreate(ctx, c, jobs, template, name, timeout, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				missing++
				if len(errs) < 3 {
					errs = append(errs, err)
				}
				return
			}
			last = max(last, took)
		}()
	}
	wg.Wait()
	res.CPUToReady = sampleCPU().since(cpuBefore)
	res.AllReady, res.NotReady = last, missing
	if missing == 0 {
		// The floor's client wrote Ready; its watch may show it a moment later.
		readyAt, _, _ := envs.waitAll(ctx, names, false, timeout)
		stages.settle(ctx, names, benchComponents, true, 30*time.Second)
		res.Stages = stages.stages(envs.created(names), readyAt)
	}
	if len(errs) > 0 {
		res.Error = fmt.Sprintf("%d not Ready, first errors: %v", missing, errs)
		res.AllReady = time.Since(start)
	}
	if apiAfter, err := e.apiServerMetrics(ctx); err == nil && apiBefore != nil {
		res.APIServerLatency, res.APIServerRequests = apiServerLatency(apiBefore, apiAfter)
		res.APIServerByResource = apiServerRequestsByResource(apiBefore, apiAfter, n)
	}
	res.JobLatency = e.floorJobLatency(ctx, names[0][:len(names[0])-4])

	// Removed outside the measurement, for the next run.
	if err := benchkit.ForEach(ctx, names, 16, func(name string) error { return floorDelete(ctx, c, name) }); err != nil {
		return res, fmt.Errorf("delete the floor's objects: %w", err)
	}
	if err := benchkit.ForEach(ctx, names, 16, func(name string) error { return e.waitNamespaceGone(ctx, name+"-ws") }); err != nil {
		return res, err
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

// floorJobLatency is how long the floor's deploy Jobs named with prefix
// took from creation to completion.
func (e *env) floorJobLatency(ctx context.Context, prefix string) Dist {
	var jobs batchv1.JobList
	if err := e.cluster.Client.List(ctx, &jobs, client.InNamespace(floorNamespace)); err != nil {
		return Dist{}
	}
	var d []time.Duration
	for _, j := range jobs.Items {
		if len(j.Name) < len(prefix) || j.Name[:len(prefix)] != prefix || j.Status.CompletionTime == nil {
			continue
		}
		d = append(d, j.Status.CompletionTime.Sub(j.CreationTimestamp.Time))
	}
	return benchkit.DistOf(d)
}

// apiServerLatency is kube-apiserver's mean request duration and its
// request count between two scrapes (watches and long-running requests
// left out).
func apiServerLatency(before, after map[string]float64) (time.Duration, float64) {
	sum := metricSum(after, "apiserver_request_duration_seconds_sum", "") - metricSum(before, "apiserver_request_duration_seconds_sum", "")
	count := metricSum(after, "apiserver_request_duration_seconds_count", "") - metricSum(before, "apiserver_request_duration_seconds_count", "")
	if count <= 0 {
		return 0, 0
	}
	return time.Duration(sum / count * float64(time.Second)), count
}

var subresourceLabel = regexp.MustCompile(`[{,]subresource="([^"]*)"`)

// apiServerRequestsByResource is kube-apiserver's requests between two
// scrapes (apiserver_request_total, every client) per environment, by verb
// and resource (with its subresource); watches are left out.
func apiServerRequestsByResource(before, after map[string]float64, n int) map[[2]string]float64 {
	out := map[[2]string]float64{}
	for k, v := range after {
		if len(k) < len("apiserver_request_total{") || k[:len("apiserver_request_total{")] != "apiserver_request_total{" {
			continue
		}
		verb, resource := verbLabel.FindStringSubmatch(k), resourceLabel.FindStringSubmatch(k)
		if verb == nil || resource == nil || verb[1] == "WATCH" || verb[1] == "CONNECT" {
			continue
		}
		r := resource[1]
		if sub := subresourceLabel.FindStringSubmatch(k); sub != nil && sub[1] != "" {
			r += "/" + sub[1]
		}
		if d := (v - before[k]) / float64(n); d > 0 {
			out[[2]string{verb[1], r}] += d
		}
	}
	return out
}
