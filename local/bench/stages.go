package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// Stages is an environment's way to Ready in a scale run, each step a
// distribution over the run's environments, timed by this process's
// watches (the same watches for the operator's run and the floor's): the
// environment created (first shown by its watch) → its first deploy Jobs
// (db, web) created; a Job
// created → its pod Succeeded (Job controller, node, the pod); db's pod
// Succeeded → api's Job created (the operator reads the pod; the floor
// waits for the Job's Complete, JobComplete); the last pod Succeeded →
// Ready; and created → Ready.
type Stages struct {
	ToFirstJob, JobToPodDone, PodDoneToJobComplete, DependencyToJob, LastPodToReady, Ready benchkit.Dist
}

// stageTracker records, per deploy Job of a namespace, when it was first
// seen, when its pod was first seen Succeeded and when the Job was first
// seen Complete, by environment and component (the Job's labels).
type stageTracker struct {
	notifier
	mu   sync.Mutex
	jobs map[[2]string]*jobTimes // environment, component
	// byName maps a Job's name to its environment and component, for its
	// pods (which name their Job by their owner reference).
	byName map[string][2]string
	// early holds pods seen Succeeded before their Job.
	early map[string]time.Time
}

type jobTimes struct {
	created, podDone, complete time.Time
}

func trackStages(ctx context.Context, c client.WithWatch, namespace string) *stageTracker {
	t := &stageTracker{jobs: map[[2]string]*jobTimes{}, byName: map[string][2]string{}, early: map[string]time.Time{}}
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{contract.LabelAction: contract.ActionDeploy}}
	jobsSynced, podsSynced := make(chan struct{}), make(chan struct{})
	go benchkit.WatchLoop(ctx, c, func() client.ObjectList { return &batchv1.JobList{} }, opts, t.observeJob, nil, jobsSynced)
	go benchkit.WatchLoop(ctx, c, func() client.ObjectList { return &corev1.PodList{} }, opts, t.observePod, nil, podsSynced)
	for _, ch := range []chan struct{}{jobsSynced, podsSynced} {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return t
}

func (t *stageTracker) observeJob(typ watch.EventType, o client.Object) {
	j, ok := o.(*batchv1.Job)
	if !ok || typ == watch.Deleted {
		return
	}
	key := [2]string{j.Labels[petriv1.LabelEnvironment], j.Labels[contract.LabelComponent]}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	jt := t.jobs[key]
	if jt == nil {
		jt = &jobTimes{created: now}
		t.jobs[key] = jt
		t.byName[j.Name] = key
		if at, ok := t.early[j.Name]; ok {
			jt.podDone = at
			delete(t.early, j.Name)
		}
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue && jt.complete.IsZero() {
			jt.complete = now
		}
	}
	t.notify()
}

func (t *stageTracker) observePod(typ watch.EventType, o client.Object) {
	p, ok := o.(*corev1.Pod)
	if !ok || typ == watch.Deleted || p.Status.Phase != corev1.PodSucceeded {
		return
	}
	owner := metav1.GetControllerOf(p)
	if owner == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	key, ok := t.byName[owner.Name]
	if !ok {
		if _, seen := t.early[owner.Name]; !seen {
			t.early[owner.Name] = now
		}
		return
	}
	if jt := t.jobs[key]; jt.podDone.IsZero() {
		jt.podDone = now
	}
	t.notify()
}

// settle waits until this process's watches have shown every deploy Job of
// the environments' components with its pod Succeeded (and, with complete,
// the Job Complete), or the timeout passes: the environments' own watch
// may show them Ready first.
func (t *stageTracker) settle(ctx context.Context, names, components []string, complete bool, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := t.changed()
		t.mu.Lock()
		all := true
		for _, n := range names {
			for _, c := range components {
				jt := t.jobs[[2]string{n, c}]
				if jt == nil || jt.podDone.IsZero() || complete && jt.complete.IsZero() {
					all = false
				}
			}
		}
		t.mu.Unlock()
		if all {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		}
	}
}

// forget drops the times recorded of the environments (a run's, before
// the next run of the same names).
func (t *stageTracker) forget(names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	drop := map[string]bool{}
	for _, n := range names {
		drop[n] = true
	}
	for k := range t.jobs {
		if drop[k[0]] {
			delete(t.jobs, k)
		}
	}
	for name, k := range t.byName {
		if drop[k[0]] {
			delete(t.byName, name)
		}
	}
	clear(t.early)
}

// stages computes the benchmark environment's stages (db and web first,
// api after db) for the environments created at created and Ready at ready.
func (t *stageTracker) stages(created, ready map[string]time.Time) Stages {
	t.mu.Lock()
	defer t.mu.Unlock()
	return stagesOf(t.jobs, created, ready)
}

func stagesOf(jobs map[[2]string]*jobTimes, created, ready map[string]time.Time) Stages {
	var toFirst, run, toComplete, dep, last, total []time.Duration
	for env, at := range created {
		db, api, web := jobs[[2]string{env, "db"}], jobs[[2]string{env, "api"}], jobs[[2]string{env, "web"}]
		if db == nil || web == nil {
			continue
		}
		toFirst = append(toFirst, earliest(db.created, web.created).Sub(at))
		for _, j := range []*jobTimes{db, api, web} {
			if j == nil || j.podDone.IsZero() {
				continue
			}
			run = append(run, j.podDone.Sub(j.created))
			if !j.complete.IsZero() {
				toComplete = append(toComplete, j.complete.Sub(j.podDone))
			}
		}
		if api != nil && !db.podDone.IsZero() {
			dep = append(dep, api.created.Sub(db.podDone))
		}
		r, ok := ready[env]
		if !ok {
			continue
		}
		total = append(total, r.Sub(at))
		if api != nil && !api.podDone.IsZero() && !web.podDone.IsZero() {
			last = append(last, r.Sub(latestOf(api.podDone, web.podDone)))
		}
	}
	return Stages{
		ToFirstJob: benchkit.DistOf(toFirst), JobToPodDone: benchkit.DistOf(run), PodDoneToJobComplete: benchkit.DistOf(toComplete),
		DependencyToJob: benchkit.DistOf(dep), LastPodToReady: benchkit.DistOf(last), Ready: benchkit.DistOf(total),
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func latestOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// writeStages writes the scale runs' stages, median / p99 of each.
func writeStages(b io.Writer, runs []ScaleResult) {
	var rows []ScaleResult
	for _, s := range runs {
		if s.Stages.Ready.N > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(b, "An environment's way to Ready, median / p99 over the run's environments, timed by the benchmark's watches of the environments, the deploy Jobs and their pods (the same for the operator's run and the floor's; an environment is created when its watch first shows it, which lags the Jobs' watch when kube-apiserver is saturated, so this step can read negative at 500 and more): created → its first deploy Jobs (db, web) created; a Job created → its pod Succeeded; the pod Succeeded → the Job Complete (what the floor waits for; the operator reads the pod); db's pod Succeeded → api's Job created; the last pod Succeeded → Ready; created → Ready:")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| scale | created → first Jobs | Job → pod Succeeded | pod Succeeded → Job Complete | db done → api Job | last pod → Ready | created → Ready |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|")
	d := func(x benchkit.Dist) string {
		if x.N == 0 {
			return "-"
		}
		return secs(x.Median) + " / " + secs(x.P99)
	}
	for _, s := range rows {
		st := s.Stages
		fmt.Fprintf(b, "| %d, %s | %s | %s | %s | %s | %s | %s |\n", s.Environments, s.Mode,
			d(st.ToFirstJob), d(st.JobToPodDone), d(st.PodDoneToJobComplete), d(st.DependencyToJob), d(st.LastPodToReady), d(st.Ready))
	}
	fmt.Fprintln(b)
}
