package controllers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
)

// TestFinalizerChangesKeepOthersFinalizers: Petri's finalizer is added and
// removed from a copy read before someone else added a finalizer of their
// own; the API server refuses the stale change (a conflict the reconcile
// retries) instead of dropping theirs, as a merge patch of the whole list
// did.
func TestFinalizerChangesKeepOthersFinalizers(t *testing.T) {
	ctx := context.Background()
	e := newEnv("finalizers", greeter("app"))
	// Outside the management namespace: the operator leaves it alone.
	e.Namespace = "default"
	e.Finalizers = []string{"example.com/first"}
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() {
		var cur petriv1.EphemeralEnvironment
		if env.Client.Get(ctx, client.ObjectKeyFromObject(e), &cur) == nil {
			cur.Finalizers = nil
			_ = env.Client.Update(ctx, &cur)
			_ = env.Client.Delete(ctx, &cur)
		}
	})
	stale := e.DeepCopy()
	var cur petriv1.EphemeralEnvironment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), &cur))
	cur.Finalizers = append(cur.Finalizers, "example.com/late")
	require.NoError(t, env.Client.Update(ctx, &cur))

	for _, present := range []bool{true, false} {
		err := controllers.SetFinalizer(ctx, env.Client, stale.DeepCopy(), present)
		assert.True(t, apierrors.IsConflict(err), "present=%v: %v", present, err)
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), &cur))
		assert.Contains(t, cur.Finalizers, "example.com/late", "present=%v: another's finalizer stays", present)
	}
	require.NoError(t, controllers.SetFinalizer(ctx, env.Client, cur.DeepCopy(), true), "from a fresh read it goes through")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), &cur))
	assert.ElementsMatch(t, []string{"example.com/first", "example.com/late", petriv1.Finalizer}, cur.Finalizers)
}
