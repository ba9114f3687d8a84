package controllers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// updateEnv changes an environment, read afresh, and retries when the
// operator's status writes got in between.
func updateEnv(t *testing.T, name string, change func(*petriv1.EphemeralEnvironment)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		e := &petriv1.EphemeralEnvironment{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, e); err != nil {
			return err
		}
		change(e)
		return env.Client.Update(context.Background(), e)
	}))
}

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
		updateEnv(t, "readd", func(e *petriv1.EphemeralEnvironment) { e.Spec.Components = components })
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

// An undeploy Job that disappears while it runs (deleted by hand, or removed
// by its TTL while the operator was down) does not hold the teardown forever:
// the next attempt starts and finishes the job.
func TestTeardownGoesOnWhenAnUndeployJobIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "lost-undeploy"
	// Its undeploy Jobs run until the test lets them end, so the first is
	// still running when it is deleted.
	undeploys := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(undeploys) }) }
	t.Cleanup(release)
	standIn(t, name, func(job standInJob) standInReply {
		if job.Action == contract.ActionUndeploy {
			return blockUntil(job, undeploys, succeedAll)
		}
		return succeedAll(job)
	})
	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("app"))))
	e := waitFor(t, name, "ready", ready)

	require.NoError(t, env.Client.Delete(ctx, e))
	e = waitFor(t, name, "undeploy running", func(e *petriv1.EphemeralEnvironment) bool {
		cs := componentNamed(e, "app")
		return cs != nil && cs.Phase == petriv1.ComponentUndeploying && cs.Job != ""
	})
	first := componentNamed(e, "app").Job
	deleteJob(t, runningJob(t, first))

	retried := eventually(90*time.Second, func() bool {
		e = current(name)
		cs := componentNamed(e, "app")
		return cs != nil && cs.Job != first && cs.Phase == petriv1.ComponentUndeploying
	})
	require.True(t, retried, "a new undeploy attempt: %s; jobs: %s", describe(e), jobsOf(t, e.UID))
	assert.Equal(t, int32(2), componentNamed(e, "app").Attempt)
	release()
	waitGone(t, e)
}
