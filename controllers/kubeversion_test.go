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
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/local/controlplane"
)

// The reason the Job controller gives a Job failed by a FailJob rule of its
// podFailurePolicy, and a Job that ran out of retries.
const (
	jobReasonPodFailurePolicy     = "PodFailurePolicy"
	jobReasonBackoffLimitExceeded = "BackoffLimitExceeded"
)

func serverVersion(t *testing.T) string {
	t.Helper()
	v, err := env.Clientset.Discovery().ServerVersion()
	require.NoError(t, err)
	return v.GitVersion
}

// jobFailure waits until the Job has failed and returns the reason of its
// Failed condition, with the Job and its pods.
func jobFailure(t *testing.T, name string) (string, *batchv1.Job, []corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	var reason string
	ok := eventually(90*time.Second, func() bool {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: name}, job); err != nil {
			return false
		}
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				reason = c.Reason
				return true
			}
		}
		return false
	})
	require.True(t, ok, "job %s never failed: %+v", name, job.Status)
	var pods corev1.PodList
	require.NoError(t, env.Client.List(ctx, &pods, client.InNamespace(mgmtNS), client.MatchingLabels{batchv1.JobNameLabel: name}))
	return reason, job, pods.Items
}

// A published-style chart that declares kubeVersion ">=1.23.0-0" and picks its
// PodDisruptionBudget's API version from .Capabilities.KubeVersion installs
// from the https chart repository through a deploy Job, with policy/v1.
func TestChartWithKubeVersionDeploysThroughAJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	version := serverVersion(t)
	e := newEnv("kubever", component("budget", chartRepo.URL, "capabilities", "0.1.0"))
	require.NoError(t, env.Client.Create(ctx, e))
	e = waitFor(t, "kubever", "ready", ready)
	ns := e.Status.TargetNamespace
	require.Len(t, e.Status.Components, 1)
	assert.Equal(t, petriv1.ComponentDeployed, e.Status.Components[0].Phase)

	// What Helm saw as the cluster's version, and what it rendered from it.
	assert.Equal(t, version, configMap(t, ns, "budget-capabilities")["kubeVersion"])
	pdb := &policyv1.PodDisruptionBudget{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "budget-capabilities"}, pdb))
	var written []string
	for _, f := range pdb.ManagedFields {
		if f.Operation == metav1.ManagedFieldsOperationUpdate || f.Operation == metav1.ManagedFieldsOperationApply {
			written = append(written, f.APIVersion)
		}
	}
	assert.Equal(t, []string{"policy/v1"}, written, "the deployer wrote the PodDisruptionBudget as policy/v1")
	assert.Equal(t, 1, pdb.Spec.MinAvailable.IntValue())

	// The operator's deploy Job carries the rule that ends it on a final
	// failure.
	job := &batchv1.Job{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: e.Status.Components[0].Job}, job))
	require.NotNil(t, job.Spec.PodFailurePolicy)
	require.Len(t, job.Spec.PodFailurePolicy.Rules, 1)
	assert.Equal(t, batchv1.PodFailurePolicyActionFailJob, job.Spec.PodFailurePolicy.Rules[0].Action)
}

// Refusals no retry can fix (a kubeVersion that excludes the cluster, a
// required value that is missing) fail their component with their own
// reason, and their Job after its first pod: the podFailurePolicy matched,
// not the backoffLimit.
func TestUnfixableChartRefusalsFailAfterOnePod(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	version := serverVersion(t)
	e := newEnv("refusals",
		component("old", imageCharts, "legacy", "0.1.0"),
		component("budget", imageCharts, "capabilities", "0.1.0"),
		component("after", imageCharts, "greeter", "0.1.0", "old"),
	)
	e.Spec.Values = map[string]apiextensionsv1.JSON{"budget": *jsonValues(map[string]any{"minAvailable": nil})}
	require.NoError(t, env.Client.Create(ctx, e))
	e = waitFor(t, "refusals", "failed", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.Phase == petriv1.EnvironmentFailed && e.Status.ObservedGeneration == e.Generation
	})
	byName := map[string]petriv1.ComponentStatus{}
	for _, cs := range e.Status.Components {
		byName[cs.Name] = cs
	}

	old := byName["old"]
	assert.Equal(t, petriv1.ComponentFailed, old.Phase)
	assert.Equal(t, "KubeVersionIncompatible: install old: chart requires kubeVersion: <1.20.0 which is incompatible with Kubernetes "+version, old.LastError)
	budget := byName["budget"]
	assert.Equal(t, petriv1.ComponentFailed, budget.Phase)
	assert.True(t, strings.HasPrefix(budget.LastError, "RequiredValueMissing: install budget: "), budget.LastError)
	assert.True(t, strings.HasSuffix(budget.LastError, ": minAvailable is required"), budget.LastError)
	assert.Equal(t, "blocked: depends on old, which failed", byName["after"].Message)

	c := findCondition(e, petriv1.ConditionComponentsDeployed)
	assert.Equal(t, petriv1.ReasonDeployFailed, c.Reason)
	assert.Contains(t, c.Message, "old (KubeVersionIncompatible: ")
	assert.Contains(t, c.Message, "budget (RequiredValueMissing: ")

	for _, cs := range []petriv1.ComponentStatus{old, budget} {
		reason, job, pods := jobFailure(t, cs.Job)
		assert.Equal(t, jobReasonPodFailurePolicy, reason, "job %s: the final exit code failed it, not the retries", cs.Job)
		assert.Equal(t, int32(1), job.Status.Failed, "job %s", cs.Job)
		require.Equal(t, 1, len(pods), "job %s ran one pod", cs.Job)
		term := pods[0].Status.ContainerStatuses[0].State.Terminated
		require.NotNil(t, term)
		assert.Equal(t, int32(3), term.ExitCode)
		res, ok := contract.Decode(term.Message)
		require.True(t, ok, "the termination message is the deployer's result: %s", term.Message)
		assert.Equal(t, cs.LastError, res.Message, "lastError is the message of the deployer's result")
		assert.False(t, res.Retryable, "no new Job of the same spec can succeed")
	}
}

// The deployer's final exit codes end its Job after one pod; any other
// failure is retried up to backoffLimit. Jobs built like the operator's, run
// by the local node and the real Job controller; the test helper plays the
// deployer and exits with the code under test.
func TestDeployerJobRetriesOnlyWhatARetryCanFix(t *testing.T) {
	t.Parallel()
	require.NoError(t, controlplane.RegisterInputs("tests/cmd"))
	tests := []struct {
		code   int
		reason string
		pods   int
	}{
		{code: 1, reason: jobReasonBackoffLimitExceeded, pods: 2},
		{code: 2, reason: jobReasonPodFailurePolicy, pods: 1},
		{code: 3, reason: jobReasonPodFailurePolicy, pods: 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("exit %d", tt.code), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			name := fmt.Sprintf("deployer-exit-%d", tt.code)
			job := jobs.Build(jobs.Spec{
				Name: name, Namespace: mgmtNS,
				ServiceAccount: "default",
				Image:          helperImage,
				Command:        []string{jobs.DeployerEntrypoint},
				Args:           []string{"fail", "--termination-log=" + jobs.TerminationLogPath, fmt.Sprint(tt.code), "Failed: exit " + fmt.Sprint(tt.code)},
				BackoffLimit:   1,
			})
			job.OwnerReferences = nil
			require.NoError(t, env.Client.Create(ctx, job))
			t.Cleanup(func() {
				_ = env.Client.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground))
			})
			reason, got, pods := jobFailure(t, name)
			assert.Equal(t, tt.reason, reason)
			assert.Equal(t, int32(tt.pods), got.Status.Failed)
			assert.Equal(t, tt.pods, len(pods), "pods of job %s", name)
			assert.Equal(t, "Failed: exit "+fmt.Sprint(tt.code), jobs.TerminationMessage(pods))
		})
	}
}
