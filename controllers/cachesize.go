package controllers

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
		// (releasebusy.Holds).
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

// cacheTransforms are the cache's transforms: managed fields stripped from
// every object, and for Jobs and pods also what the operator never reads.
func cacheTransforms() (all, jobs, pods toolscache.TransformFunc) {
	strip := cache.TransformStripManagedFields()
	return strip, chain(strip, slimCachedJob), chain(strip, slimCachedPod)
}
