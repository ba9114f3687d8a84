package controllers

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator's cache holds every Job and pod of every environment: six
// of each per environment after one deploy and teardown, until the Job
// TTL, so the cache, not the reconciles, sets the operator's memory
// (docs/benchmarks.md has the figures). The operator reads
// Jobs' status and labels and pods' labels and container statuses, and
// never writes either back, so the cache keeps only those: no managed
// fields anywhere, no pod template in Jobs, no spec in pods.

// slimCachedJob drops the pod template of a cached Job.
func slimCachedJob(in any) (any, error) {
	if job, ok := in.(*batchv1.Job); ok {
		job.Spec.Template = corev1.PodTemplateSpec{}
	}
	return in, nil
}

// slimCachedPod drops the spec of a cached pod but for its node.
func slimCachedPod(in any) (any, error) {
	if pod, ok := in.(*corev1.Pod); ok {
		// The node stays: a pod on a node that is lost holds nothing
		// (releaseHolds).
		pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName}
	}
	return in, nil
}

// chain runs transforms in order.
func chain(fns ...toolscache.TransformFunc) toolscache.TransformFunc {
	return func(in any) (any, error) {
		var err error
		for _, fn := range fns {
			if in, err = fn(in); err != nil {
				return nil, err
			}
		}
		return in, nil
	}
}

// indexJobPods indexes cached pods by the Job that created them: a
// label-selected list from the cache scans every cached pod, and the
// operator lists a finished Job's pods on every pass that observes it, so
// the scan grows with every environment (docs/benchmarks.md has the
// figures).
const indexJobPods = "jobPods"

func indexPodsByJob(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, indexJobPods, func(obj client.Object) []string {
		if job := obj.GetLabels()[batchv1.JobNameLabel]; job != "" {
			return []string{job}
		}
		return nil
	})
}

// jobPods lists the pods of a Job: through the index when r is the cache,
// by label when r is the API server (which has no such field and refuses
// the index lookup).
func jobPods(ctx context.Context, r client.Reader, job *batchv1.Job) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{indexJobPods: job.Name}); err == nil {
		return pods.Items, nil
	}
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, fmt.Errorf("list pods of job %s: %w", job.Name, err)
	}
	return pods.Items, nil
}

// cacheTransforms are the cache's transforms: managed fields stripped from
// every object, and for Jobs and pods also what the operator never reads.
func cacheTransforms() (all, jobs, pods toolscache.TransformFunc) {
	strip := cache.TransformStripManagedFields()
	return strip, chain(strip, slimCachedJob), chain(strip, slimCachedPod)
}
