package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// An environment's life emits the Events a person looks for (conditions
// met, a teardown, every problem) and not one per progress step: at a
// thousand environments those were a third of the operator's writes; then,
// of the rest, one per component deployed and one for ComponentsDeployed
// beside Ready were half the Events up to Ready.
func TestEventsFollowStatusFlipsAndProblems(t *testing.T) {
	rec := events.NewFakeRecorder(100)
	r := &EphemeralEnvironmentReconciler{Recorder: rec}
	env := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "e", Generation: 1}}
	step := func(set func(e *petriv1.EphemeralEnvironment)) []string {
		before := env.DeepCopy()
		set(env)
		r.recordTransitions(before, env)
		var got []string
		for {
			select {
			case e := <-rec.Events:
				got = append(got, e)
			default:
				return got
			}
		}
	}
	cond := func(typ string, status metav1.ConditionStatus, reason string) func(*petriv1.EphemeralEnvironment) {
		return func(e *petriv1.EphemeralEnvironment) { setCondition(e, typ, status, reason, typ+" "+reason) }
	}
	both := func(fs ...func(*petriv1.EphemeralEnvironment)) func(*petriv1.EphemeralEnvironment) {
		return func(e *petriv1.EphemeralEnvironment) {
			for _, f := range fs {
				f(e)
			}
		}
	}

	assert.Empty(t, step(both(cond(petriv1.ConditionNamespaceBound, metav1.ConditionFalse, petriv1.ReasonNamespaceReserved),
		cond(petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonProgressing))), "conditions appearing not yet met")
	assert.Equal(t, []string{"Normal Bound NamespaceBound Bound"},
		step(both(cond(petriv1.ConditionNamespaceBound, metav1.ConditionTrue, "Bound"),
			cond(petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployProgressing),
			cond(petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonDeployProgressing))), "only the namespace bound")
	assert.ElementsMatch(t, []string{"Warning DeployFailed ComponentsDeployed DeployFailed", "Warning DeployFailed Ready DeployFailed"},
		step(both(cond(petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployFailed),
			cond(petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonDeployFailed))), "a failure is always an Event")
	assert.Empty(t, step(both(cond(petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployProgressing),
		cond(petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonDeployProgressing))), "progress again after a retry")
	assert.Equal(t, []string{"Normal Succeeded Ready Succeeded"},
		step(both(cond(petriv1.ConditionComponentsDeployed, metav1.ConditionTrue, petriv1.ReasonSucceeded),
			cond(petriv1.ConditionReady, metav1.ConditionTrue, petriv1.ReasonSucceeded))), "Ready tells of the components deployed with it")
	assert.Equal(t, []string{"Normal TeardownProgressing Ready TeardownProgressing"},
		step(cond(petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonTeardownProgressing)), "a teardown starting")
	assert.Equal(t, []string{"Warning NamespaceNotOwned Stalled NamespaceNotOwned"},
		step(cond(petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonNamespaceNotOwned)))
}
