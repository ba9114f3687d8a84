package ui

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// jobPod is the running pod of a Job of environment env.
func jobPod(env, job, action string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "petri-system", Name: job + "-x7k2p", UID: types.UID("uid-" + job), Labels: map[string]string{
			batchv1.JobNameLabel: job, petriv1.LabelEnvironment: env, contract.LabelAction: action,
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// readsOf counts the pod lists and the log reads the clientset was asked for.
func readsOf(cs *fake.Clientset) (lists, logs int) {
	for _, a := range cs.Actions() {
		switch {
		case a.GetVerb() == "list" && a.GetResource().Resource == "pods":
			lists++
		case a.GetVerb() == "get" && a.GetSubresource() == "log":
			logs++
		}
	}
	return lists, logs
}

// Many viewers of one running Job cost one pods list and one log read:
// those asking while it is read share it, those asking within LogReuse
// get it again, and once LogReuse has passed the tail is read anew.
func TestLogTailsAreSharedAndReused(t *testing.T) {
	const viewers, reuse = 50, 5 * time.Second
	cs := fake.NewClientset(jobPod("pr-7", "pr-7-web-deploy-1", contract.ActionDeploy))
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	// Every viewer looks at the clock before it reads; the first list is
	// held until all have looked, so that all ask while it is read.
	var looks atomic.Int32
	looked := make(chan struct{})
	now := func() time.Time {
		if looks.Add(1) == viewers {
			close(looked)
		}
		return clk.Now()
	}
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case <-looked:
		case <-time.After(10 * time.Second):
			t.Error("the viewers did not all look for a recent tail")
		}
		return false, nil, nil
	})
	l := newLogReader(cs.CoreV1(), "petri-system", 100, reuse, now)

	var wg sync.WaitGroup
	texts := make([]string, viewers)
	errs := make([]error, viewers)
	for i := range viewers {
		wg.Go(func() {
			text, err := l.tailOf(context.Background(), "pr-7", "pr-7-web-deploy-1")
			texts[i], errs[i] = string(text), err
		})
	}
	wg.Wait()
	for i := range viewers {
		require.NoError(t, errs[i])
		assert.Equal(t, "fake logs", texts[i])
	}
	lists, logs := readsOf(cs)
	assert.Equal(t, 1, lists, "one pods list for all the viewers at once")
	assert.Equal(t, 1, logs, "one log read for all the viewers at once")

	clk.Step(reuse - time.Millisecond)
	_, err := l.tailOf(context.Background(), "pr-7", "pr-7-web-deploy-1")
	require.NoError(t, err)
	lists, logs = readsOf(cs)
	assert.Equal(t, [2]int{1, 1}, [2]int{lists, logs}, "within LogReuse the tail is served again")

	clk.Step(time.Millisecond)
	_, err = l.tailOf(context.Background(), "pr-7", "pr-7-web-deploy-1")
	require.NoError(t, err)
	lists, logs = readsOf(cs)
	assert.Equal(t, [2]int{2, 2}, [2]int{lists, logs}, "after LogReuse the tail is read anew")
}

// That a Job's log is not shown is as costly to find out as a tail and is
// reused the same way; another environment's tail is its own.
func TestLogTailsReuseARefusalAndKeepEnvironmentsApart(t *testing.T) {
	cs := fake.NewClientset(
		jobPod("pr-7", "pr-7-db-provision-1", contract.ActionProvision),
		jobPod("pr-8", "pr-8-web-deploy-1", contract.ActionDeploy),
	)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	l := newLogReader(cs.CoreV1(), "petri-system", 100, 5*time.Second, clk.Now)

	for range 3 {
		_, err := l.tailOf(context.Background(), "pr-7", "pr-7-db-provision-1")
		require.ErrorIs(t, err, errNotShown)
	}
	lists, logs := readsOf(cs)
	assert.Equal(t, [2]int{1, 0}, [2]int{lists, logs}, "a provision Job's log is never read, and its refusal reused")

	_, err := l.tailOf(context.Background(), "pr-8", "pr-8-web-deploy-1")
	require.NoError(t, err)
	_, err = l.tailOf(context.Background(), "pr-8", "pr-7-db-provision-1")
	require.NoError(t, err, "pr-8 has no such Job's pod: not pr-7's answer")
	lists, logs = readsOf(cs)
	assert.Equal(t, [2]int{3, 1}, [2]int{lists, logs})
}
