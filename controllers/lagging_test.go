package controllers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
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
