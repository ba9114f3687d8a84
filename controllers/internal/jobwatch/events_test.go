package jobwatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
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
		return OutcomeChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: cur})
	}
	assert.False(t, passes(job(nil), started), "start time")
	assert.False(t, passes(started, active), "an active pod")
	assert.False(t, passes(active, criteria), "success criteria met: the Job is not complete yet")
	assert.True(t, passes(active, complete), "complete")
	assert.True(t, passes(active, failed), "failed")
	assert.False(t, passes(complete, complete), "nothing new after the outcome")
	assert.True(t, passes(active, deleting), "deletion begun")
	assert.True(t, passes(active, relabelled), "labels changed")
	assert.True(t, OutcomeChanged.Create(event.CreateEvent{Object: job(nil)}), "created")
	assert.True(t, OutcomeChanged.Delete(event.DeleteEvent{Object: job(nil)}), "deleted")
}
