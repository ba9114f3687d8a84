package controllers

import (
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/petri-dev/petri/controllers/internal/jobs"
)

// jobOutcomeChanged lets through the Job events a reconciler acts on: a Job
// created or deleted, its deletion begun, its labels changed, and its
// outcome known (finished, succeeded or failed). A Job's status changes
// four or five times on its way (start time, active pod, pod finalizers
// counted, success criteria met, complete); every step woke the owning
// environment for a reconcile, with its API requests, that could change
// nothing: the reconciler reads a Job's outcome only (jobs.Finished).
// docs/benchmarks.md has the figures.
var jobOutcomeChanged = predicate.Funcs{
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
