// Package jobwatch reads what a Petri Job says: its outcome, from the cache
// and, when the cache does not know it, from the API server, and from the pod
// that succeeded before the Job says so; and the Job and pod events that
// tell an owner to look again. It decides nothing: the reconcilers do.
package jobwatch

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/internal/redact"
)

// State is what the reconciler needs to know of one Job.
type State struct {
	Exists, Done, Succeeded bool
	// Message is for people: the deployer's result's Message, or what
	// another container (a provision step) or the Job's condition said.
	Message           string
	Started, Finished *metav1.Time
	// Result is the deployer's typed Result; typed is false when the Job
	// left none (not the deployer, a pod killed before it wrote one, a Job
	// that failed by its deadline).
	Result contract.Result
	Typed  bool
}

// SetMessage records a termination message: a deployer's result is decoded,
// anything else is kept for people only and never parsed. Either is
// redacted of credentials (the deployer redacts its own, a step's container
// may not): the message goes into conditions, Events and pull requests.
func (st *State) SetMessage(msg string) {
	if res, ok := contract.Decode(msg); ok {
		res.Message = redact.String(res.Message)
		st.Result, st.Typed, st.Message = res, true, res.Message
		return
	}
	st.Message = redact.String(msg)
}

// Retryable reports whether a new Job of the same spec may succeed where
// this failed one did not: the deployer says so in its result; a Job that
// left no result (it ran out of time or pods) may.
func (st State) Retryable() bool {
	return !st.Typed || st.Result.Retryable
}

// ObserveLive reads a Job from the cache and, when the cache does not know
// it, from the API server; uncached says it was found only there.
//
// A finished Job's outcome is read from its pod, and the pod cache can lag
// the Job cache: the Job already says Failed or Complete while the cached
// pod does not show its container's end yet. Judged from that copy, a
// deploy that failed for a reason no retry cures (RenderFailed) would count
// as a retryable failure without a result, and a success would record
// revision 0. So a finished Job whose cached pods left no deployer result is
// read again from the API server, once per outcome.
func ObserveLive(ctx context.Context, cache, api client.Reader, namespace, name string) (st State, uncached bool, err error) {
	st, err = Observe(ctx, cache, namespace, name)
	if err != nil {
		return st, false, err
	}
	if st.Exists && (!st.Done || st.Typed) {
		return st, false, nil
	}
	live, err := Observe(ctx, api, namespace, name)
	if err != nil {
		return st, false, err
	}
	if st.Exists {
		// Found in the cache, finished, without a result there.
		if !live.Exists {
			return st, false, nil
		}
		return live, false, nil
	}
	return live, live.Exists, nil
}

// Observe reads a Job and, when it failed, the one-line reason its pod
// wrote.
func Observe(ctx context.Context, r client.Reader, namespace, name string) (State, error) {
	job := &batchv1.Job{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job); err != nil {
		if apierrors.IsNotFound(err) {
			return State{}, nil
		}
		return State{}, fmt.Errorf("get job %s: %w", name, err)
	}
	st := State{Exists: true, Started: job.Status.StartTime, Finished: job.Status.CompletionTime}
	st.Done, st.Succeeded, st.Message = jobs.Finished(job)
	if !st.Done {
		return FromPods(ctx, r, job, st), nil
	}
	if st.Succeeded {
		pods, err := Pods(ctx, r, job)
		if err != nil {
			return st, err
		}
		st.SetMessage(jobs.CompletionMessage(pods))
	}
	if st.Done && !st.Succeeded {
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobFailed {
				t := c.LastTransitionTime
				st.Finished = &t
			}
		}
		pods, err := Pods(ctx, r, job)
		if err != nil {
			return st, err
		}
		if msg := jobs.TerminationMessage(pods); msg != "" {
			st.SetMessage(msg)
		}
	}
	return st, nil
}

// FromPods reads the outcome of a Job that has not finished yet from its
// pods: the Job controller marks a Job Complete a second or more after its
// pod ended (it gathers a Job's pod events for a second before it syncs the
// Job), and a pod that succeeded with the deployer's result is the outcome
// already. A failed pod is not: the Job may run another. The pods are read
// from the cache's index only: a Job read from the API server (the cache
// does not know it) waits for its condition, without a list of pods on
// every look.
func FromPods(ctx context.Context, r client.Reader, job *batchv1.Job, st State) State {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{PodsIndex: job.Name}); err != nil {
		return st
	}
	at, ok := jobs.SucceededPod(pods.Items)
	if !ok {
		return st
	}
	res := st
	res.SetMessage(jobs.CompletionMessage(pods.Items))
	if !res.Typed {
		return st
	}
	res.Done, res.Succeeded, res.Finished = true, true, at
	return res
}

// PodsIndex indexes cached pods by the Job that created them: a
// label-selected list from the cache scans every cached pod, and the
// operator lists a finished Job's pods on every pass that observes it, so
// the scan grows with every environment (docs/benchmarks.md has the
// figures).
const PodsIndex = "jobPods"

func IndexPodsByJob(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, PodsIndex, func(obj client.Object) []string {
		if job := obj.GetLabels()[batchv1.JobNameLabel]; job != "" {
			return []string{job}
		}
		return nil
	})
}

// Pods lists the pods of a Job: through the index when r is the cache,
// by label when r is the API server (which has no such field and refuses
// the index lookup).
func Pods(ctx context.Context, r client.Reader, job *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{PodsIndex: job.Name}); err == nil {
		return pods.Items, nil
	}
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	return pods.Items, nil
}

// UncachedPoll is how often a running Job that only the API server knows is
// looked at again: the cache sends no events for it.
const UncachedPoll = 2 * time.Second
