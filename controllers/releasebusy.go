package controllers

import (
	"context"
	"fmt"
	"sync"

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

// releaseBusy names a deploy or undeploy Job of the component's release,
// other than job, that has not finished, or whose pod still runs though
// the Job is gone; "" when there is none. The caller
// then starts nothing and looks at the environment again shortly
// (uncachedPoll). It only reads env: the deploys of one pass run it at once.
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
func (r *EphemeralEnvironmentReconciler) releaseBusy(ctx context.Context, env *petriv1.EphemeralEnvironment, component, job string) (string, error) {
	var list batchv1.JobList
	if err := r.List(ctx, &list, client.InNamespace(r.Options.ManagementNamespace), client.MatchingFields{indexReleaseJobs: releaseKey(string(env.UID), naming.LabelValue(component))}); err != nil {
		return "", fmt.Errorf("list jobs of release %s: %w", component, err)
	}
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
		return r.busy(ctx, component, other.Name), nil
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
			return "", err
		}
		if st.exists && !st.done {
			return r.busy(ctx, component, name), nil
		}
	}
	owner, err := runningReleasePod(ctx, r.Client, r.Options.ManagementNamespace, releaseKey(string(env.UID), naming.LabelValue(component)), job, jobCached)
	if err != nil || owner == "" {
		return "", err
	}
	return r.busy(ctx, component, owner), nil
}

// runningReleasePod names the Job of a pod of the release (by its
// indexReleasePods key) that still runs; "" when none does. A pod outlives
// its Job when the Job is deleted or fails while it runs: the kubelet gives
// it its grace period, and a Job deleted with its pods orphaned leaves them
// running to the end. Its Helm operation may still be under way, so no
// other starts before it has ended. Only job's own pod, job being there
// (jobExists), is the work itself. The pods come from c's cache.
func runningReleasePod(ctx context.Context, c client.Reader, ns, key, job string, jobExists bool) (string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingFields{indexReleasePods: key}); err != nil {
		return "", fmt.Errorf("list pods of release %s: %w", key, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		owner := p.Labels[batchv1.JobNameLabel]
		if owner == job && jobExists || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		return owner, nil
	}
	return "", nil
}

// sharedReleaseBusy names a Job of the shared workload's release whose pod
// still runs though the status no longer follows it (runningReleasePod);
// "" when there is none. The status names the one Job of the release that
// runs, and a pass waits for it (observeRelease, teardown); a pod of a Job
// deleted or failed while it ran is seen only here.
func (r *SharedWorkloadReconciler) sharedReleaseBusy(ctx context.Context, sw *petriv1.SharedWorkload, job string) (string, error) {
	var cur batchv1.Job
	err := r.Get(ctx, client.ObjectKey{Namespace: r.Options.ManagementNamespace, Name: job}, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("get job %s: %w", job, err)
	}
	jobExists := err == nil
	owner, err := runningReleasePod(ctx, r.Client, r.Options.ManagementNamespace, sharedReleaseKey(naming.LabelValue(sw.Name)), job, jobExists)
	if owner != "" {
		log.FromContext(ctx).Info("Release busy, waiting", "job", owner)
	}
	return owner, err
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

func (r *EphemeralEnvironmentReconciler) busy(ctx context.Context, component, job string) string {
	log.FromContext(ctx).Info("Release busy, waiting", "component", component, "job", job)
	return job
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
