package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

// releaseWait is what a check before a Helm operation found of the
// release's earlier operations: the Job that holds the release (and the pod
// of it that runs, when the hold is a pod's), and the pods that had not
// finished but never will (jobs.PodMayRun), passed over, each with why. The
// status says both: what a launch waits for, and, once it starts, why it
// stopped waiting for a pod that had not finished.
type releaseWait struct {
	job, pod string
	passed   []string
}

// busy reports whether another Helm operation holds the release.
func (w releaseWait) busy() bool { return w.job != "" }

// waiting says what a launch waits for.
func (w releaseWait) waiting() string {
	if w.pod != "" {
		return fmt.Sprintf("waiting for job %s, another Helm operation on this release, to finish (its pod %s still runs)", w.job, w.pod)
	}
	return fmt.Sprintf("waiting for job %s, another Helm operation on this release, to finish", w.job)
}

// passedOver says why a launch did not wait for the pods it passed over;
// "" when it passed over none.
func (w releaseWait) passedOver() string {
	if len(w.passed) == 0 {
		return ""
	}
	return "started without waiting for " + strings.Join(w.passed, "; ")
}

// releaseBusy finds a deploy or undeploy Job of the component's release,
// other than job, that has not finished, or whose pod still runs though
// the Job is gone. The caller then starts nothing and looks at the
// environment again shortly (uncachedPoll). A Job or pod that has not
// finished but never will (its pod's node is lost, its phase Unknown, or it
// is terminating long past its grace period) does not hold the release:
// the deployer's own Lease on the release keeps two Helm operations apart
// should it come back. It only reads env: the deploys of one pass run it at
// once.
//
// The cache shows the release's Jobs but for two: one created a moment ago
// (its watch event not delivered yet, its start perhaps not in the status
// because that write failed) and one that no longer matches the cache's
// label selector. This operator remembers the last Job it created of each
// release, and the status names the last one started; each of those the
// cache does not show is read from the API server. A Job created by an
// earlier run of the operator is in the cache from its first sync on. So no
// list of every Job goes to the API server before each Helm operation (at a
// thousand environments it was one of the costliest requests;
// docs/benchmarks.md has the figures).
func (r *EphemeralEnvironmentReconciler) releaseBusy(ctx context.Context, env *petriv1.EphemeralEnvironment, component, job string) (releaseWait, error) {
	var list batchv1.JobList
	if err := r.List(ctx, &list, client.InNamespace(r.Options.ManagementNamespace), client.MatchingFields{indexReleaseJobs: releaseKey(string(env.UID), naming.LabelValue(component))}); err != nil {
		return releaseWait{}, fmt.Errorf("list jobs of release %s: %w", component, err)
	}
	held := releaseHolds{c: r.Client, nodes: r.APIReader, now: r.Options.now()}
	cached := map[string]bool{}
	for i := range list.Items {
		other := &list.Items[i]
		cached[other.Name] = true
		if done, _, _ := jobs.Finished(other); other.Name == job || done || podSucceeded(ctx, r.Client, other, jobState{exists: true}).done {
			// A Job whose pod succeeded with the deployer's result ran its
			// Helm operation to the end (the deployer released the
			// release's Lease before it exited), though the Job controller
			// may mark it Complete a second later.
			continue
		}
		holds, err := held.jobMayRun(ctx, other)
		if err != nil {
			return releaseWait{}, err
		}
		if holds {
			return r.busy(ctx, component, held.wait(other.Name, "")), nil
		}
	}
	jobCached := cached[job]
	var candidates []string
	if cs := findComponentStatus(env, component); cs != nil && cs.Job != "" {
		candidates = append(candidates, cs.Job)
	}
	if last := r.releaseJobs.last(env, component); last != "" {
		candidates = append(candidates, last)
	}
	for _, name := range candidates {
		if name == job || cached[name] {
			continue
		}
		cached[name] = true
		st, _, err := observeJobLive(ctx, r.Client, r.APIReader, r.Options.ManagementNamespace, name)
		if err != nil {
			return releaseWait{}, err
		}
		if st.exists && !st.done {
			return r.busy(ctx, component, held.wait(name, "")), nil
		}
	}
	w, err := held.runningPod(ctx, r.Options.ManagementNamespace, releaseKey(string(env.UID), naming.LabelValue(component)), job, jobCached)
	if err != nil {
		return releaseWait{}, err
	}
	if w.busy() {
		return r.busy(ctx, component, w), nil
	}
	if len(w.passed) > 0 {
		log.FromContext(ctx).Info("Release held by pods that will never finish; not waiting for them", "component", component, "passed", w.passed)
	}
	return w, nil
}

// releaseHolds tells, for one check of a release, which of its unfinished
// pods may still run their Helm operation; it remembers those it passed
// over. Pods come from c's cache, their nodes from the API server (nodes),
// read only for a pod that would otherwise hold the release.
type releaseHolds struct {
	c, nodes client.Reader
	now      time.Time
	passed   []string
	judged   map[types.UID]bool
}

// wait is the check's finding with job (and pod) holding the release.
func (h *releaseHolds) wait(job, pod string) releaseWait {
	return releaseWait{job: job, pod: pod, passed: h.passed}
}

// podMayRun says whether p may still run its Helm operation; one that never
// will is remembered as passed over, with why.
func (h *releaseHolds) podMayRun(ctx context.Context, p *corev1.Pod) (bool, error) {
	if mayRun, ok := h.judged[p.UID]; ok {
		return mayRun, nil
	}
	var node *corev1.Node
	found := false
	if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		node = &corev1.Node{}
		err := h.nodes.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node)
		switch {
		case err == nil:
			found = true
		case !apierrors.IsNotFound(err):
			return false, fmt.Errorf("get node %s of pod %s: %w", p.Spec.NodeName, p.Name, err)
		}
	}
	mayRun, why := jobs.PodMayRun(p, node, found, h.now)
	if !mayRun && why != "" {
		h.passed = append(h.passed, fmt.Sprintf("pod %s of job %s: %s", p.Name, p.Labels[batchv1.JobNameLabel], why))
	}
	if h.judged == nil {
		h.judged = map[types.UID]bool{}
	}
	h.judged[p.UID] = mayRun
	return mayRun, nil
}

// jobMayRun says whether an unfinished Job may still be running its Helm
// operation: it may, unless it has pods and none of them may run. (A Job
// whose pod is on a lost node stays active while that pod is never
// confirmed gone.)
func (h *releaseHolds) jobMayRun(ctx context.Context, job *batchv1.Job) (bool, error) {
	var pods corev1.PodList
	if err := h.c.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{indexJobPods: job.Name}); err != nil {
		return false, fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	if len(pods.Items) == 0 {
		return true, nil
	}
	for i := range pods.Items {
		mayRun, err := h.podMayRun(ctx, &pods.Items[i])
		if err != nil || mayRun {
			return true, err
		}
	}
	return false, nil
}

// runningPod finds the Job of a pod of the release (by its indexReleasePods
// key) that still runs. A pod outlives its Job when the Job is deleted or
// fails while it runs: the kubelet gives it its grace period, and a Job
// deleted with its pods orphaned leaves them running to the end. Its Helm
// operation may still be under way, so no other starts before it has
// ended. Only job's own pod, job being there (jobExists), is the work
// itself.
func (h *releaseHolds) runningPod(ctx context.Context, ns, key, job string, jobExists bool) (releaseWait, error) {
	var pods corev1.PodList
	if err := h.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingFields{indexReleasePods: key}); err != nil {
		return releaseWait{}, fmt.Errorf("list pods of release %s: %w", key, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		owner := p.Labels[batchv1.JobNameLabel]
		if owner == job && jobExists {
			continue
		}
		mayRun, err := h.podMayRun(ctx, p)
		if err != nil {
			return releaseWait{}, err
		}
		if mayRun {
			return h.wait(owner, p.Name), nil
		}
	}
	return releaseWait{passed: h.passed}, nil
}

// sharedReleaseBusy finds a Job of the shared workload's release whose pod
// still runs though the status no longer follows it (runningPod). The
// status names the one Job of the release that runs, and a pass waits for
// it (observeRelease, teardown); a pod of a Job deleted or failed while it
// ran is seen only here.
func (r *SharedWorkloadReconciler) sharedReleaseBusy(ctx context.Context, sw *petriv1.SharedWorkload, job string) (releaseWait, error) {
	var cur batchv1.Job
	err := r.Get(ctx, client.ObjectKey{Namespace: r.Options.ManagementNamespace, Name: job}, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return releaseWait{}, fmt.Errorf("get job %s: %w", job, err)
	}
	jobExists := err == nil
	held := releaseHolds{c: r.Client, nodes: r.APIReader, now: r.Options.now()}
	w, err := held.runningPod(ctx, r.Options.ManagementNamespace, sharedReleaseKey(naming.LabelValue(sw.Name)), job, jobExists)
	switch {
	case err != nil:
		return releaseWait{}, err
	case w.busy():
		log.FromContext(ctx).Info("Release busy, waiting", "job", w.job, "pod", w.pod)
	case len(w.passed) > 0:
		log.FromContext(ctx).Info("Release held by pods that will never finish; not waiting for them", "passed", w.passed)
	}
	return w, nil
}

// indexReleasePods indexes cached pods of deploy and undeploy Jobs by the
// release they operate on, as indexReleaseJobs does their Jobs.
const indexReleasePods = "releasePods"

func indexPodsByRelease(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, indexReleasePods, releaseOf)
}

// indexReleaseJobs indexes cached deploy and undeploy Jobs by the release
// they operate on: the environment's UID and the component.
const indexReleaseJobs = "releaseJobs"

func releaseKey(envUID, component string) string { return envUID + "/" + component }

func indexJobsByRelease(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &batchv1.Job{}, indexReleaseJobs, releaseOf)
}

// sharedReleaseKey is the indexReleaseJobs and indexReleasePods key of a
// shared workload's release, by the shared workload's label value.
func sharedReleaseKey(sharedWorkload string) string { return "shared/" + sharedWorkload }

// releaseOf is the release a deploy or undeploy Job, or its pod, operates
// on (by their labels): an environment's component, or a shared workload;
// none for every other object.
func releaseOf(obj client.Object) []string {
	l := obj.GetLabels()
	if a := l[contract.LabelAction]; a != contract.ActionDeploy && a != contract.ActionUndeploy {
		return nil
	}
	switch {
	case l[petriv1.LabelEnvironmentUID] != "":
		return []string{releaseKey(l[petriv1.LabelEnvironmentUID], l[contract.LabelComponent])}
	case l[LabelSharedWorkload] != "":
		return []string{sharedReleaseKey(l[LabelSharedWorkload])}
	}
	return nil
}

func (r *EphemeralEnvironmentReconciler) busy(ctx context.Context, component string, w releaseWait) releaseWait {
	log.FromContext(ctx).Info("Release busy, waiting", "component", component, "job", w.job, "pod", w.pod)
	return w
}

// releaseJobs remembers the last deploy or undeploy Job this operator
// created of each environment's release, until the environment is gone. An
// environment made again under the same name has another UID, and nothing
// remembered of the one before.
type releaseJobs struct {
	mu sync.Mutex
	m  map[types.NamespacedName]createdJobs
}

type createdJobs struct {
	uid  types.UID
	jobs map[string]string // component -> Job
}

func (j *releaseJobs) created(env *petriv1.EphemeralEnvironment, component, job string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	key := client.ObjectKeyFromObject(env)
	if j.m == nil {
		j.m = map[types.NamespacedName]createdJobs{}
	}
	c, ok := j.m[key]
	if !ok || c.uid != env.UID {
		c = createdJobs{uid: env.UID, jobs: map[string]string{}}
		j.m[key] = c
	}
	c.jobs[component] = job
}

func (j *releaseJobs) last(env *petriv1.EphemeralEnvironment, component string) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	c, ok := j.m[client.ObjectKeyFromObject(env)]
	if !ok || c.uid != env.UID {
		return ""
	}
	return c.jobs[component]
}

func (j *releaseJobs) forget(key types.NamespacedName) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.m, key)
}
