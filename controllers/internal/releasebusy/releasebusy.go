// Package releasebusy tells whether a Helm release is free for the next
// operation: whether an earlier deploy or undeploy Job of it, or a pod of
// one, may still be running its Helm operation. It reads Jobs and pods from
// the cache (through the indexes it defines) and the API server; the
// reconcilers decide what to do with the answer.
package releasebusy

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
)

// Wait is what a check before a Helm operation found of the release's
// earlier operations: the Job that holds the release (and the pod of it
// that runs, when the hold is a pod's), and the pods that had not finished
// but never will (jobs.PodMayRun), passed over, each with why. The status
// says both: what a launch waits for, and, once it starts, why it stopped
// waiting for a pod that had not finished.
type Wait struct {
	Job, Pod string
	Passed   []string
}

// Busy reports whether another Helm operation holds the release.
func (w Wait) Busy() bool { return w.Job != "" }

// Waiting says what a launch waits for.
func (w Wait) Waiting() string {
	if w.Pod != "" {
		return fmt.Sprintf("waiting for job %s, another Helm operation on this release, to finish (its pod %s still runs)", w.Job, w.Pod)
	}
	return fmt.Sprintf("waiting for job %s, another Helm operation on this release, to finish", w.Job)
}

// PassedOver says why a launch did not wait for the pods it passed over;
// "" when it passed over none.
func (w Wait) PassedOver() string {
	if len(w.Passed) == 0 {
		return ""
	}
	return "started without waiting for " + strings.Join(w.Passed, "; ")
}

// Release is one check of an environment's release before a Helm
// operation: where its Jobs are, how to read them, and which Jobs the cache
// may not show.
type Release struct {
	// Cache reads the cached Jobs and pods; API reads the API server (Jobs
	// the cache does not show, and nodes).
	Cache, API client.Reader
	// Namespace holds the Jobs; Key is the release's index key (Key).
	Namespace, Key string
	// Job is the operation about to start (or running): never a hold.
	Job string
	// Candidates are Jobs of the release the cache may not show: the one
	// the status names and the last one this operator created.
	Candidates []string
	// Now is the check's time, for pods terminating past their grace.
	Now time.Time
}

// Check finds a deploy or undeploy Job of the release, other than
// rel.Job, that has not finished, or whose pod still runs though the Job is
// gone. The caller then starts nothing and looks again shortly. A Job or
// pod that has not finished but never will (its pod's node is lost, its
// phase Unknown, or it is terminating long past its grace period) does not
// hold the release: the deployer's own Lease on the release keeps two Helm
// operations apart should it come back.
//
// The cache shows the release's Jobs but for two: one created a moment ago
// (its watch event not delivered yet, its start perhaps not in the status
// because that write failed) and one that no longer matches the cache's
// label selector. Those are rel.Candidates; each of them the cache does not
// show is read from the API server. A Job created by an earlier run of the
// operator is in the cache from its first sync on. So no list of every Job
// goes to the API server before each Helm operation (at a thousand
// environments it was one of the costliest requests; docs/benchmarks.md has
// the figures).
func Check(ctx context.Context, rel Release) (Wait, error) {
	var list batchv1.JobList
	if err := rel.Cache.List(ctx, &list, client.InNamespace(rel.Namespace), client.MatchingFields{JobsIndex: rel.Key}); err != nil {
		return Wait{}, fmt.Errorf("list jobs of release %s: %w", rel.Key, err)
	}
	held := Holds{Cache: rel.Cache, Nodes: rel.API, Now: rel.Now}
	cached := map[string]bool{}
	for i := range list.Items {
		other := &list.Items[i]
		cached[other.Name] = true
		if done, _, _ := jobs.Finished(other); other.Name == rel.Job || done || jobwatch.FromPods(ctx, rel.Cache, other, jobwatch.State{Exists: true}).Done {
			// A Job whose pod succeeded with the deployer's result ran its
			// Helm operation to the end (the deployer released the
			// release's Lease before it exited), though the Job controller
			// may mark it Complete a second later.
			continue
		}
		holds, err := held.JobMayRun(ctx, other)
		if err != nil {
			return Wait{}, err
		}
		if holds {
			return held.Wait(other.Name, ""), nil
		}
	}
	jobCached := cached[rel.Job]
	for _, name := range rel.Candidates {
		if name == rel.Job || cached[name] {
			continue
		}
		cached[name] = true
		st, _, err := jobwatch.ObserveLive(ctx, rel.Cache, rel.API, rel.Namespace, name)
		if err != nil {
			return Wait{}, err
		}
		if st.Exists && !st.Done {
			return held.Wait(name, ""), nil
		}
	}
	return held.RunningPod(ctx, rel.Namespace, rel.Key, rel.Job, jobCached)
}

// Holds tells, for one check of a release, which of its unfinished pods
// may still run their Helm operation; it remembers those it passed over.
// Pods come from Cache, their nodes from the API server (Nodes), read only
// for a pod that would otherwise hold the release.
type Holds struct {
	Cache, Nodes client.Reader
	Now          time.Time
	passed       []string
	judged       map[types.UID]bool
}

// Wait is the check's finding with job (and pod) holding the release.
func (h *Holds) Wait(job, pod string) Wait {
	return Wait{Job: job, Pod: pod, Passed: h.passed}
}

// podMayRun says whether p may still run its Helm operation; one that never
// will is remembered as passed over, with why.
func (h *Holds) podMayRun(ctx context.Context, p *corev1.Pod) (bool, error) {
	if mayRun, ok := h.judged[p.UID]; ok {
		return mayRun, nil
	}
	var node *corev1.Node
	found := false
	if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		node = &corev1.Node{}
		err := h.Nodes.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node)
		switch {
		case err == nil:
			found = true
		case !apierrors.IsNotFound(err):
			return false, fmt.Errorf("get node %s of pod %s: %w", p.Spec.NodeName, p.Name, err)
		}
	}
	mayRun, why := jobs.PodMayRun(p, node, found, h.Now)
	if !mayRun && why != "" {
		h.passed = append(h.passed, fmt.Sprintf("pod %s of job %s: %s", p.Name, p.Labels[batchv1.JobNameLabel], why))
	}
	if h.judged == nil {
		h.judged = map[types.UID]bool{}
	}
	h.judged[p.UID] = mayRun
	return mayRun, nil
}

// JobMayRun says whether an unfinished Job may still be running its Helm
// operation: it may, unless it has pods and none of them may run. (A Job
// whose pod is on a lost node stays active while that pod is never
// confirmed gone.)
func (h *Holds) JobMayRun(ctx context.Context, job *batchv1.Job) (bool, error) {
	var pods corev1.PodList
	if err := h.Cache.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{jobwatch.PodsIndex: job.Name}); err != nil {
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

// RunningPod finds the Job of a pod of the release (by its PodsIndex key)
// that still runs. A pod outlives its Job when the Job is deleted or fails
// while it runs: the kubelet gives it its grace period, and a Job deleted
// with its pods orphaned leaves them running to the end. Its Helm operation
// may still be under way, so no other starts before it has ended. Only
// job's own pod, job being there (jobExists), is the work itself.
func (h *Holds) RunningPod(ctx context.Context, ns, key, job string, jobExists bool) (Wait, error) {
	var pods corev1.PodList
	if err := h.Cache.List(ctx, &pods, client.InNamespace(ns), client.MatchingFields{PodsIndex: key}); err != nil {
		return Wait{}, fmt.Errorf("list pods of release %s: %w", key, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		owner := p.Labels[batchv1.JobNameLabel]
		if owner == job && jobExists {
			continue
		}
		mayRun, err := h.podMayRun(ctx, p)
		if err != nil {
			return Wait{}, err
		}
		if mayRun {
			return h.Wait(owner, p.Name), nil
		}
	}
	return Wait{Passed: h.passed}, nil
}
