package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/controllers/internal/fences"
)

// The admission fences (controllers/internal/fences), under the names
// cmd/petri-operator and the fences' tests use.
var (
	// FencePolicies are the ValidatingAdmissionPolicies config/fences
	// installs.
	FencePolicies = fences.Policies
	// ErrFencesMissing: the API server would not refuse what the fences
	// refuse.
	ErrFencesMissing = fences.ErrMissing
	// ErrFencesNotEnforced: a fence is there but lets through what it must
	// refuse.
	ErrFencesNotEnforced = fences.ErrNotEnforced
)

// OperatorServiceAccount is the operator's identity in its management
// namespace, in every cluster; FenceParams the ConfigMap the fences read
// their settings from.
const (
	OperatorServiceAccount = fences.OperatorServiceAccount
	FenceParams            = fences.Params
)

// FenceGate holds the operator's start until the fences are in place.
type FenceGate = fences.Gate

// OperatorUsername is the username of the operator's ServiceAccount.
func OperatorUsername(namespace string) string { return fences.OperatorUsername(namespace) }

// VerifyFences checks that the fences are installed, enforcing, and agree
// with the operator's settings.
func VerifyFences(ctx context.Context, c client.Reader, o Options) error {
	return fences.Verify(ctx, c, o)
}

// ProveFences has the API server refuse what the fences must refuse.
func ProveFences(ctx context.Context, c client.Client, o Options) error {
	return fences.Prove(ctx, c, o)
}

// NewFenceGate is the gate of the operator's start.
func NewFenceGate(c client.Reader, o Options) *FenceGate { return fences.NewGate(c, o) }

// AwaitFences waits until the fences are in place.
func AwaitFences(ctx context.Context, c client.Reader, o Options) error {
	return fences.Await(ctx, c, o)
}
