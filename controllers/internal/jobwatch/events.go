package jobwatch

import (
	"context"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/petri-dev/petri/controllers/internal/jobs"
)

// OutcomeChanged lets through the Job events a reconciler acts on: a Job
// created or deleted, its deletion begun, its labels changed, and its
// outcome known (finished, succeeded or failed). A Job's status changes
// four or five times on its way (start time, active pod, pod finalizers
// counted, success criteria met, complete); every step woke the owning
// environment for a reconcile, with its API requests, that could change
// nothing: the reconciler reads a Job's outcome only (jobs.Finished).
// docs/benchmarks.md has the figures.
var OutcomeChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*batchv1.Job)
		cur, okCur := e.ObjectNew.(*batchv1.Job)
		if !okOld || !okCur {
			return true
		}
		if old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() || !maps.Equal(old.Labels, cur.Labels) {
			return true
		}
		oldDone, oldOK, _ := jobs.Finished(old)
		curDone, curOK, _ := jobs.Finished(cur)
		return oldDone != curDone || oldOK != curOK
	},
}

// PodSucceededNow lets through the pod events that tell a Job's outcome a
// second or more before the Job does: a pod that has just succeeded.
var PodSucceededNow = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Pod)
		cur, okCur := e.ObjectNew.(*corev1.Pod)
		return okOld && okCur && old.Status.Phase != corev1.PodSucceeded && cur.Status.Phase == corev1.PodSucceeded
	},
}

// NotToldByItsPod drops the event of a Job turning Complete whose pod, in
// the cache, succeeded with the deployer's result: that pod's event woke the
// environment already (PodSucceededNow), and the pass read the outcome from
// it; a second pass a second later could change nothing.
func NotToldByItsPod(c client.Reader) predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*batchv1.Job)
		cur, okCur := e.ObjectNew.(*batchv1.Job)
		if !okOld || !okCur || !cur.DeletionTimestamp.IsZero() || !maps.Equal(old.Labels, cur.Labels) {
			return true
		}
		if done, ok, _ := jobs.Finished(cur); !done || !ok {
			return true
		}
		st := FromPods(context.Background(), c, cur, State{Exists: true})
		return !st.Done
	}}
}
