package controllers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

func TestJobEventsThatWakeTheOwner(t *testing.T) {
	job := func(mutate func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "web-app-deploy-g1", Labels: map[string]string{"a": "b"}}}
		if mutate != nil {
			mutate(j)
		}
		return j
	}
	started := job(func(j *batchv1.Job) {
		now := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
		j.Status.StartTime = &now
	})
	active := job(func(j *batchv1.Job) { j.Status.Active = 1 })
	criteria := job(func(j *batchv1.Job) {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}
	})
	complete := job(func(j *batchv1.Job) {
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
		}
	})
	failed := job(func(j *batchv1.Job) {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}
	})
	deleting := job(func(j *batchv1.Job) {
		now := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
		j.DeletionTimestamp = &now
	})
	relabelled := job(func(j *batchv1.Job) { j.Labels = map[string]string{"a": "c"} })

	passes := func(old, cur *batchv1.Job) bool {
		return jobOutcomeChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur})
	}
	assert.False(t, passes(job(nil), started), "start time")
	assert.False(t, passes(started, active), "an active pod")
	assert.False(t, passes(active, criteria), "success criteria met: the Job is not complete yet")
	assert.True(t, passes(active, complete), "complete")
	assert.True(t, passes(active, failed), "failed")
	assert.False(t, passes(complete, complete), "nothing new after the outcome")
	assert.True(t, passes(active, deleting), "deletion begun")
	assert.True(t, passes(active, relabelled), "labels changed")
	assert.True(t, jobOutcomeChanged.Create(event.CreateEvent{Object: job(nil)}), "created")
	assert.True(t, jobOutcomeChanged.Delete(event.DeleteEvent{Object: job(nil)}), "deleted")
}

func TestSharedWorkloadEventsThatWakeItsEnvironments(t *testing.T) {
	sw := func(mutate func(*petriv1.SharedWorkload)) *petriv1.SharedWorkload {
		s := &petriv1.SharedWorkload{ObjectMeta: metav1.ObjectMeta{Name: "db", Generation: 1}}
		s.Status.BoundEnvironments = 3
		s.Status.Phase = petriv1.EnvironmentReady
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	base := sw(nil)
	for name, tt := range map[string]struct {
		new  *petriv1.SharedWorkload
		want bool
	}{
		"another environment bound": {sw(func(s *petriv1.SharedWorkload) { s.Status.BoundEnvironments = 4 }), false},
		"nothing changed":           {sw(nil), false},
		"its spec changed":          {sw(func(s *petriv1.SharedWorkload) { s.Generation = 2 }), true},
		"it is being deleted": {sw(func(s *petriv1.SharedWorkload) {
			now := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
			s.DeletionTimestamp = &now
		}), true},
		"it is no longer ready":      {sw(func(s *petriv1.SharedWorkload) { s.Status.Phase = petriv1.EnvironmentDeploying }), true},
		"its conditions changed too": {sw(func(s *petriv1.SharedWorkload) { s.Status.BoundEnvironments = 4; s.Status.ObservedGeneration = 1 }), true},
		"its release was verified": {sw(func(s *petriv1.SharedWorkload) {
			s.Status.Verification = &petriv1.VerificationStatus{Job: "db-release-verify-g1-0a1b2c3d", Trigger: "Periodic", Result: "Verified: db=1"}
		}), false},
		"it was deployed again": {sw(func(s *petriv1.SharedWorkload) { s.Status.Recoveries = 1 }), true},
	} {
		assert.Equal(t, tt.want, sharedWorkloadChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tt.new}), name)
	}
	assert.True(t, sharedWorkloadChanged.Create(event.CreateEvent{Object: base}))
	assert.True(t, sharedWorkloadChanged.Delete(event.DeleteEvent{Object: base}))
}
