package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// atRestKeepsOneVerifyJobAndOneValuesSecret (hostile-input defect 5):
// an environment verified period after period and pushed to twice keeps no
// pile of verify Jobs (each verified one goes once its outcome is in
// status.verification) and one values Secret per component (the older
// generations' go once the component is deployed again), where before it
// kept every verify Job for the Job TTL and every generation's values.
func atRestKeepsOneVerifyJobAndOneValuesSecret(t *testing.T) {
	ctx := context.Background()
	const name = "at-rest"
	e := newEnv(name, greeter("web"), greeter("api"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, name, "Ready", ready)

	for i := range 2 {
		// The verify controller writes the environment's status every
		// period: the push is made on a fresh copy until no write got in
		// between.
		var gen int64
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			e = get(t, name)
			e.Spec.Values = map[string]apiextensionsv1.JSON{"web": *jsonValues(map[string]any{"message": fmt.Sprintf("push %d", i)})}
			err := env.Client.Update(ctx, e)
			gen = e.Generation
			return err
		}))
		e = waitFor(t, name, "Ready at the new generation", func(e *petriv1.EphemeralEnvironment) bool {
			return ready(e) && e.Status.ObservedGeneration == gen
		})
	}

	verified := map[string]bool{}
	waitFor(t, name, "four verify Jobs verified the releases", func(e *petriv1.EphemeralEnvironment) bool {
		if v := e.Status.Verification; v != nil && v.FinishedAt != nil && strings.HasPrefix(v.Result, "Verified") {
			verified[v.Job] = true
		}
		return len(verified) >= 4
	})
	require.Eventually(t, func() bool {
		for job := range verified {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: job}, &batchv1.Job{})
			if !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every verified verify Job is deleted")
	assert.LessOrEqual(t, len(stepJobs(t, e.UID, contract.ActionVerify)), 1, "at most the running verify Job is left")

	values := func() map[string][]string {
		var list corev1.SecretList
		require.NoError(t, env.Client.List(ctx, &list, client.InNamespace(mgmtNS), client.MatchingLabels{
			petriv1.LabelEnvironmentUID: string(e.UID), contract.LabelAction: contract.ActionDeploy,
		}))
		out := map[string][]string{}
		for _, s := range list.Items {
			c := s.Labels[contract.LabelComponent]
			out[c] = append(out[c], s.Labels[contract.LabelGeneration])
		}
		return out
	}
	require.Eventually(t, func() bool {
		v := values()
		return len(v["web"]) == 1 && len(v["api"]) == 1
	}, 30*time.Second, 50*time.Millisecond, "one values Secret per component")
	v := values()
	current := []string{fmt.Sprint(e.Generation)}
	assert.Equal(t, current, v["web"], "web's values of the current generation")
	assert.Equal(t, current, v["api"], "api's values of the current generation")
}
