package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// RequestKind is requestKind, for the table test.
var RequestKind = requestKind

// Cache slimming and the pod index, for their unit tests.
var (
	SlimCachedJob  = slimCachedJob
	SlimCachedPod  = slimCachedPod
	JobPods        = jobPods
	IndexJobPods   = indexJobPods
	IndexPodsByJob = indexPodsByJob
)

// SetFinalizer is setFinalizer, for its test against the API server.
var SetFinalizer = setFinalizer

// JobOutcome is what observeJobLive read of a Job, for its test against
// the API server.
type JobOutcome struct {
	Exists, Done, Succeeded, Typed, Retryable bool
	Reason                                    string
	Revision                                  int
}

// ObserveJobLive is observeJobLive, reading the Job through cache first.
func ObserveJobLive(ctx context.Context, cache, api client.Reader, namespace, name string) (JobOutcome, error) {
	st, _, err := observeJobLive(ctx, cache, api, namespace, name)
	return JobOutcome{
		Exists: st.exists, Done: st.done, Succeeded: st.succeeded, Typed: st.typed, Retryable: st.retryable(),
		Reason: string(st.result.Reason), Revision: st.result.Revision,
	}, err
}

// OperatorNamespace is the namespace the operator creates for env at level,
// and EnsureAdminBinding the RoleBinding it makes and restores there: the
// fences' test makes both as the operator.
func OperatorNamespace(env *petriv1.EphemeralEnvironment, key []byte, level string) *corev1.Namespace {
	return withPodSecurity(newOwnedNamespace(env, key), level)
}

// EnsureAdminBinding is ensureAdminBinding.
var EnsureAdminBinding = ensureAdminBinding

// BindingStaging is the staged binding's name, for the test that stages one
// as an earlier version did.
var BindingStaging = bindingStaging
