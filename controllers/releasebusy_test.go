package controllers_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Before each Helm operation the operator checks that no other runs on the
// release, from its cache and the Jobs it knows of, without listing Jobs on
// the API server: over an environment's whole life no Job list names it.
// On its way to Ready it reads its namespace once (the name is free) and
// records two Events: the namespace bound, and Ready (which tells of the
// components deployed with it).
func TestWayToReadyListsNoJobsAndRecordsTwoEvents(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "nolist", succeedAll)
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("nolist", greeter("one"), greeter("two", "one"), greeter("three"))))
	e := waitFor(t, "nolist", "ready", ready)
	assert.Equal(t, 1, readsOf("/api/v1/namespaces/"+e.Status.TargetNamespace), "reads of the namespace: the check that its name is free, and none before its create")
	var reasons []string
	// Events are written in order, asynchronously: Ready's is the last.
	require.True(t, eventually(10*time.Second, func() bool {
		var events corev1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(mgmtNS)); err != nil {
			return false
		}
		reasons = nil
		readySeen := false
		for _, ev := range events.Items {
			if ev.InvolvedObject.UID == e.UID {
				reasons = append(reasons, ev.Reason)
				readySeen = readySeen || ev.Reason == findCondition(e, petriv1.ConditionReady).Reason
			}
		}
		return readySeen
	}), "Ready's Event")
	assert.ElementsMatch(t, []string{petriv1.ReasonNamespaceBindSucceeded, findCondition(e, petriv1.ConditionReady).Reason}, reasons)

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	assert.Zero(t, jobListsNaming(string(e.UID)), "Job lists of the API server naming the environment's UID")
}
