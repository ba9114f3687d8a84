package controllers

import (
	"errors"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// conditionReason is what the API server accepts as a condition's reason
// (metav1.Condition's validation, in the CRD).
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// A pass that fails after every domain condition is met (creating a verify
// Job timed out) leaves the environment Reconciling with a reason the API
// server accepts: an empty one made the whole status patch fail, and the
// pass's other findings with it.
func TestSummaryOfAFailedPassAfterEverythingIsMet(t *testing.T) {
	r := &EphemeralEnvironmentReconciler{Recorder: &events.FakeRecorder{}}
	env := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "shop", Generation: 3}}
	env.Spec.Components = []petriv1.Component{{Name: "web"}}
	env.Status.TargetNamespace = "shop-c0ff"
	setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionTrue, petriv1.ReasonNamespaceBindSucceeded, "bound")
	setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionTrue, petriv1.ReasonDeploySucceeded, "1 components deployed")

	r.summarize(env, &pass{}, errors.New("create job shop-releases-verify: the server was unable to return a response in the time allotted"))

	ready := findStatusCondition(t, env, petriv1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Regexp(t, conditionReason, ready.Reason)
	assert.Contains(t, ready.Message, "retrying: create job shop-releases-verify")
	reconciling := findStatusCondition(t, env, petriv1.ConditionReconciling)
	assert.Equal(t, metav1.ConditionTrue, reconciling.Status)
	assert.Regexp(t, conditionReason, reconciling.Reason)
	assert.Equal(t, petriv1.EnvironmentDeploying, env.Status.Phase)
}

func findStatusCondition(t *testing.T, env *petriv1.EphemeralEnvironment, typ string) metav1.Condition {
	t.Helper()
	for _, c := range env.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	require.Failf(t, "no condition", "%s", typ)
	return metav1.Condition{}
}
