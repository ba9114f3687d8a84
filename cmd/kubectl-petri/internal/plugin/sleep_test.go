package plugin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// sleep asks the operator to scale the environment's workloads to zero,
// wake to restore them; both set their annotation and, with --wait, wait for
// the outcome.
func TestSleepAndWakeScaleTheEnvironment(t *testing.T) {
	create(t, prEnvironment("nap", greeter("web")))
	ns := waitFor(t, "nap", "Ready", ready).Status.TargetNamespace
	replicas := func() int32 {
		var d appsv1.Deployment
		require.NoError(t, cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &d))
		return *d.Spec.Replicas
	}
	require.Equal(t, int32(1), replicas())

	out, errOut, err := kubectlPetri(t, cluster.Kubeconfig, "sleep", "nap", "--wait")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `^environment nap: sleep requested \(petri.dev/sleep-requested=\S+\)\nenvironment nap: asleep\n$`, out)
	assert.Equal(t, int32(0), replicas())
	e := waitFor(t, "nap", "Sleeping", func(e *petriv1.EphemeralEnvironment) bool { return e.Status.Phase == petriv1.EnvironmentSleeping })
	assert.Equal(t, e.Annotations[petriv1.AnnotationSleepRequested], e.Status.Sleep.SleepRequested)

	out, errOut, err = kubectlPetri(t, cluster.Kubeconfig, "wake", "nap", "--wait")
	require.NoError(t, err, errOut)
	assert.Regexp(t, `^environment nap: wake requested \(petri.dev/wake-requested=\S+\)\nenvironment nap: Ready\n$`, out)
	assert.Equal(t, int32(1), replicas())
	e = waitFor(t, "nap", "Ready", ready)
	assert.Equal(t, e.Annotations[petriv1.AnnotationWakeRequested], e.Status.Sleep.WakeRequested)
	assert.False(t, e.Status.Sleep.Asleep)

	// Waking an awake environment changes nothing and says so at once.
	out, errOut, err = kubectlPetri(t, cluster.Kubeconfig, "wake", "nap", "--wait")
	require.NoError(t, err, errOut)
	assert.Contains(t, out, "environment nap: Ready\n")

	_, _, err = kubectlPetri(t, cluster.Kubeconfig, "sleep", "missing")
	assert.ErrorContains(t, err, "environment missing in namespace petri-system")
	_, _, err = kubectlPetri(t, cluster.Kubeconfig, "wake", "missing")
	assert.ErrorContains(t, err, "environment missing in namespace petri-system")
}
