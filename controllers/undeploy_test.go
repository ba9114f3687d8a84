package controllers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

func componentNamed(e *petriv1.EphemeralEnvironment, name string) *petriv1.ComponentStatus {
	for i := range e.Status.Components {
		if e.Status.Components[i].Name == name {
			return &e.Status.Components[i]
		}
	}
	return nil
}

// Removing a component, adding it back and removing it again uninstalls its
// release both times: each removal runs an undeploy Job of its own instead of
// adopting the earlier one.
func TestComponentRemovedTwiceIsUndeployedTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	je := watchJobs(t, "readd")
	require.NoError(t, env.Client.Create(ctx, newEnv("readd", greeter("keep"), greeter("flip"))))
	e := waitFor(t, "readd", "ready", ready)
	ns := e.Status.TargetNamespace
	require.Equal(t, map[int]string{1: "deployed"}, helmReleases(t, ns)["flip"])

	setComponents := func(gen int64, components ...petriv1.Component) *petriv1.EphemeralEnvironment {
		t.Helper()
		e := get(t, "readd")
		e.Spec.Components = components
		require.NoError(t, env.Client.Update(ctx, e))
		return waitFor(t, "readd", "ready at the new generation", func(e *petriv1.EphemeralEnvironment) bool {
			return e.Generation == gen && ready(e) && (len(components) == 2 || componentNamed(e, "flip") == nil)
		})
	}
	setComponents(2, greeter("keep"))
	assert.Empty(t, helmReleases(t, ns)["flip"], "the first removal uninstalled the release")
	setComponents(3, greeter("keep"), greeter("flip"))
	assert.Equal(t, map[int]string{1: "deployed"}, helmReleases(t, ns)["flip"], "added back: installed again")
	setComponents(4, greeter("keep"))
	assert.Empty(t, helmReleases(t, ns)["flip"], "the second removal uninstalled the release too")
	assert.Equal(t, 2, je.count("undeploy/flip/"), "one undeploy Job per removal")
}
