package jobwatch

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/petri-dev/petri/api/contract"
)

// A Job whose pod succeeded with the deployer's result is finished for the
// operator before the Job controller marks it Complete (it syncs a Job a
// second or more after its pod's end); a failed pod, or a pod that left no
// result, is not an outcome: the Job may run another pod.
func TestJobOutcomeIsReadFromAPodThatSucceeded(t *testing.T) {
	ctx := context.Background()
	ended := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	result := contract.Encode(contract.Result{Action: contract.ActionDeploy, Outcome: contract.OutcomeSucceeded, Message: "deployed", Revision: 3})
	pod := func(name, job string, phase corev1.PodPhase, exit int32, msg string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: name, Labels: map[string]string{batchv1.JobNameLabel: job}},
			Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: "deployer",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg, FinishedAt: ended}}}}},
		}
	}
	job := func(name string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: name}}
	}
	c := fake.NewClientBuilder().
		WithObjects(job("ok"), job("failed"), job("silent"), job("running"),
			pod("ok-1", "ok", corev1.PodSucceeded, 0, result),
			pod("failed-1", "failed", corev1.PodFailed, 1, result),
			pod("silent-1", "silent", corev1.PodSucceeded, 0, "not a result"),
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: "running-1", Labels: map[string]string{batchv1.JobNameLabel: "running"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}).
		WithIndex(&corev1.Pod{}, PodsIndex, func(o client.Object) []string { return []string{o.GetLabels()[batchv1.JobNameLabel]} }).
		Build()

	st, err := Observe(ctx, c, "m", "ok")
	require.NoError(t, err)
	assert.True(t, st.Done && st.Succeeded && st.Typed, "a pod that succeeded with a result: %+v", st)
	assert.Equal(t, 3, st.Result.Revision)
	require.NotNil(t, st.Finished)
	assert.True(t, st.Finished.Equal(&ended), "finished when the pod's container ended")
	for _, name := range []string{"failed", "silent", "running"} {
		st, err := Observe(ctx, c, "m", name)
		require.NoError(t, err)
		assert.False(t, st.Done, "%s: not finished until the Job says so", name)
	}
	// The API server (no index) is not asked for the pods of a Job that
	// has not finished.
	plain := fake.NewClientBuilder().WithObjects(job("ok"), pod("ok-1", "ok", corev1.PodSucceeded, 0, result)).Build()
	st, err = Observe(ctx, plain, "m", "ok")
	require.NoError(t, err)
	assert.False(t, st.Done)

	// The Job turning Complete wakes the environment again only when its
	// pod did not tell the outcome already.
	complete := func(name string) *batchv1.Job {
		j := job(name)
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		return j
	}
	told := NotToldByItsPod(c)
	assert.False(t, told.Update(event.UpdateEvent{ObjectOld: job("ok"), ObjectNew: complete("ok")}), "told by its pod")
	assert.True(t, told.Update(event.UpdateEvent{ObjectOld: job("silent"), ObjectNew: complete("silent")}), "its pod left no result")
	assert.True(t, told.Update(event.UpdateEvent{ObjectOld: job("gone"), ObjectNew: complete("gone")}), "no pod in the cache")

	// The pod's success wakes the environment; its other changes do not.
	running, succeeded := pod("p", "ok", corev1.PodRunning, 0, ""), pod("p", "ok", corev1.PodSucceeded, 0, result)
	assert.True(t, PodSucceededNow.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: succeeded}))
	assert.False(t, PodSucceededNow.Update(event.UpdateEvent{ObjectOld: succeeded, ObjectNew: succeeded}))
	assert.False(t, PodSucceededNow.Update(event.UpdateEvent{ObjectOld: running, ObjectNew: running}))
}
