package controllers

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// deploy runs the deploy graph.
func (r *EphemeralEnvironmentReconciler) deploy(_ context.Context, env *petriv1.EphemeralEnvironment, _ *pass) error {
	setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionTrue, petriv1.ReasonDeploySucceeded, "")
	return nil
}

// undeployComponents runs undeploy Jobs in reverse dependency order.
func (r *EphemeralEnvironmentReconciler) undeployComponents(_ context.Context, _ *petriv1.EphemeralEnvironment, _ *pass) (bool, error) {
	return true, nil
}

// deprovisionBindings runs the deprovision Job of every binding.
func (r *EphemeralEnvironmentReconciler) deprovisionBindings(_ context.Context, _ *petriv1.EphemeralEnvironment, _ *pass) (bool, error) {
	return true, nil
}
