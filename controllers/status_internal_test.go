package controllers

import (
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

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

// A failed generation's Stalled condition keeps the time it became True:
// each pass over the unchanged failure set it again with the present as its
// transition time, so the status differed from the one read and every pass
// wrote it. Transition times come from the operator's clock.
func TestUnchangedFailureNeedsNoStatusWrite(t *testing.T) {
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	r := &EphemeralEnvironmentReconciler{Recorder: &events.FakeRecorder{}, Options: Options{Clock: clk}}
	env := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "shop", Generation: 2}}
	env.Spec.Components = []petriv1.Component{{Name: "web"}}
	setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionTrue, petriv1.ReasonNamespaceBindSucceeded, "bound")
	// As the passes that deployed it left it.
	setCondition(env, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonDeployProgressing, "running: web")
	setCondition(env, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonDeployProgressing, "running: web")
	setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployFailed, "failed: web (ValuesInvalid: no)")

	before := env.DeepCopy()
	r.finishStatus(before, env, &pass{}, nil)
	require.Equal(t, petriv1.EnvironmentFailed, env.Status.Phase)
	assert.Equal(t, start, findStatusCondition(t, env, petriv1.ConditionStalled).LastTransitionTime.Time, "dated by the operator's clock")

	// What the API server keeps (times to the second), read by the next pass
	// a minute later.
	data, err := json.Marshal(env)
	require.NoError(t, err)
	stored := &petriv1.EphemeralEnvironment{}
	require.NoError(t, json.Unmarshal(data, stored))
	clk.SetTime(start.Add(time.Minute))
	before = stored.DeepCopy()
	r.finishStatus(before, stored, &pass{}, nil)
	assert.True(t, equality.Semantic.DeepEqual(before.Status, stored.Status), "nothing changed, nothing to write:\n%v\n%v", before.Status.Conditions, stored.Status.Conditions)
	assert.Equal(t, start, findStatusCondition(t, stored, petriv1.ConditionStalled).LastTransitionTime.UTC())
}
