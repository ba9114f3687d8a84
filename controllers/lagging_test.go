package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/controllers/internal/jobs"
)

// laggingPods reads the API server as a cache that has seen each Job's end
// but not yet its pod's: every pod it lists still shows its containers
// running, without the termination message their end wrote.
type laggingPods struct{ client.Reader }

func (l laggingPods) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	if pods, ok := list.(*corev1.PodList); ok {
		for i := range pods.Items {
			for j := range pods.Items[i].Status.ContainerStatuses {
				cs := &pods.Items[i].Status.ContainerStatuses[j]
				cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: pods.Items[i].CreationTimestamp}}
			}
		}
	}
	return nil
}

// TestOutcomeIsReadPastALaggingPodCache (hostile-input defect 11): a Job
// that the cache shows finished while its cached pod does not show the end
// yet is judged by the pod the API server has. Judged by the cached pod, a
// ChartNotFound (no retry cures it) would be a failure without a result,
// retried, its reason lost; a success would record revision 0.
func TestOutcomeIsReadPastALaggingPodCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv("lagging", component("missing", imageCharts+"/missing", "missing", "0.1.0"), greeter("app"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, "lagging", "one failed, one deployed", func(e *petriv1.EphemeralEnvironment) bool {
		phases := map[string]petriv1.ComponentPhase{}
		for _, cs := range e.Status.Components {
			phases[cs.Name] = cs.Phase
		}
		return phases["missing"] == petriv1.ComponentFailed && phases["app"] == petriv1.ComponentDeployed
	})
	jobOf := map[string]string{}
	for _, cs := range e.Status.Components {
		jobOf[cs.Name] = cs.Job
	}
	// The environment's status may show a deploy's outcome before the Job
	// controller marks its Job finished (the operator reads it from the
	// succeeded pod): this case is of a Job that shows its end.
	waitJobFinished(t, jobOf["missing"])
	waitJobFinished(t, jobOf["app"])
	lagging := laggingPods{env.Client}

	failed, err := controllers.ObserveJobLive(ctx, lagging, env.Client, mgmtNS, jobOf["missing"])
	require.NoError(t, err)
	assert.True(t, failed.Done && !failed.Succeeded, "%+v", failed)
	assert.True(t, failed.Typed, "the deployer's result, read from the API server's pod")
	assert.Equal(t, "ChartNotFound", failed.Reason)
	assert.False(t, failed.Retryable, "a missing chart is not retried")

	deployed, err := controllers.ObserveJobLive(ctx, lagging, env.Client, mgmtNS, jobOf["app"])
	require.NoError(t, err)
	assert.True(t, deployed.Succeeded && deployed.Typed, "%+v", deployed)
	assert.Equal(t, 1, deployed.Revision, "the revision the deploy made, not 0")
}

// waitJobFinished watches the management namespace's Job name until the API
// server shows it finished.
func waitJobFinished(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w, err := env.Client.Watch(ctx, &batchv1.JobList{}, client.InNamespace(mgmtNS), client.MatchingFields{"metadata.name": name})
	require.NoError(t, err)
	defer w.Stop()
	for ev := range w.ResultChan() {
		if j, ok := ev.Object.(*batchv1.Job); ok {
			if done, _, _ := jobs.Finished(j); done {
				return
			}
		}
	}
	t.Fatalf("Job %s did not finish within 90s", name)
}
