package controllers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// setRedeploy sets the petri.dev/redeploy annotation, as kubectl petri
// redeploy does.
func setRedeploy(t *testing.T, name, value string) {
	t.Helper()
	e := get(t, name)
	patch := client.MergeFrom(e.DeepCopy())
	if e.Annotations == nil {
		e.Annotations = map[string]string{}
	}
	e.Annotations[petriv1.AnnotationRedeploy] = value
	require.NoError(t, env.Client.Patch(context.Background(), e, patch))
}

func deployJobs(t *testing.T, envName string) map[string]bool {
	t.Helper()
	var list batchv1.JobList
	require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(mgmtNS),
		client.MatchingLabels{petriv1.LabelEnvironment: envName, contract.LabelAction: contract.ActionDeploy}))
	out := map[string]bool{}
	for _, j := range list.Items {
		out[j.Name] = true
	}
	return out
}

// Each new value of petri.dev/redeploy runs every component's deploy again,
// with a new Job and a new Helm revision, without a spec change; a value
// already honoured, also after a restart, starts nothing.
func redeployAnnotationRunsTheGraphAgainOncePerValue(t *testing.T) {
	e := newEnv("redeploy",
		component("web", imageCharts, "greeter", "0.1.0"),
		component("api", imageCharts, "greeter", "0.1.0", "web"),
	)
	require.NoError(t, env.Client.Create(context.Background(), e))
	first := waitFor(t, "redeploy", "Ready", ready)
	gen := first.Generation
	require.Len(t, deployJobs(t, "redeploy"), 2)
	ns := first.Status.TargetNamespace
	require.Equal(t, map[int]string{1: "deployed"}, helmReleases(t, ns)["web"])

	setRedeploy(t, "redeploy", "2026-01-01T00:00:00Z")
	again := waitFor(t, "redeploy", "redeploy honoured and Ready again", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.LastRedeploy == "2026-01-01T00:00:00Z" && ready(e)
	})
	assert.Equal(t, gen, again.Generation, "a redeploy changes no spec")
	for _, c := range again.Status.Components {
		assert.Equal(t, petriv1.ComponentDeployed, c.Phase, c.Name)
		assert.NotEqual(t, c.Job, componentJob(first, c.Name), "component %s ran a new Job", c.Name)
	}
	require.Len(t, deployJobs(t, "redeploy"), 4)
	for _, name := range []string{"web", "api"} {
		assert.Equal(t, "deployed", helmReleases(t, ns)[name][2], "release %s upgraded to revision 2", name)
	}

	// The same value again, and an operator restart: nothing deploys. The
	// next value shows the operator has looked at the environment since.
	setRedeploy(t, "redeploy", "2026-01-01T00:00:00Z")
	restartOperator(t)
	setRedeploy(t, "redeploy", "second")
	waitFor(t, "redeploy", "second redeploy honoured and Ready", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.LastRedeploy == "second" && ready(e)
	})
	assert.Len(t, deployJobs(t, "redeploy"), 6, "one deploy Job per component and request")
	web := helmReleases(t, ns)["web"]
	assert.Len(t, web, 3, "revisions of web: %v", web)
	assert.Equal(t, "deployed", web[3])

	require.NoError(t, env.Client.Delete(context.Background(), e))
	waitGone(t, e)
}

func componentJob(e *petriv1.EphemeralEnvironment, name string) string {
	for _, c := range e.Status.Components {
		if c.Name == name {
			return c.Job
		}
	}
	return ""
}
