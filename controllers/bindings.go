package controllers

import (
	"context"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// deprovisionBindings runs the deprovision Job of every binding.
func (r *EphemeralEnvironmentReconciler) deprovisionBindings(_ context.Context, _ *petriv1.EphemeralEnvironment, _ *pass) (bool, error) {
	return true, nil
}
