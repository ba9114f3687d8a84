package stack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
)

// The kubectl commands that show an environment run side by side, and
// their outputs are printed in order. Each fake kubectl waits until all of
// them have started: one after the other, the first would wait forever.
func TestShowEnvironmentRunsKubectlSideBySide(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	require.NoError(t, os.Mkdir(started, 0o755))
	kubectl := filepath.Join(dir, "kubectl")
	script := fmt.Sprintf(`#!/bin/sh
touch %[1]q/$$
while [ "$(ls %[1]q | wc -l)" -lt 4 ]; do sleep 0.01; done
shift 2
echo "out: $*"
`, started)
	require.NoError(t, os.WriteFile(kubectl, []byte(script), 0o755))

	var out bytes.Buffer
	sc := &Scenario{
		Stack:  &Stack{opts: Options{Binaries: map[string]string{BinKubectl: kubectl}}, Cluster: &controlplane.Cluster{Kubeconfig: "kubeconfig"}},
		Report: NewReport(&out),
	}
	env := &petriv1.EphemeralEnvironment{Status: petriv1.EphemeralEnvironmentStatus{TargetNamespace: "hello-pr-1-abcd"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, sc.showEnvironment(ctx, env, true), "the commands did not all run at once")

	text := out.String()
	last := -1
	for _, cmd := range []string{
		"get ee -n " + ManagementNamespace,
		"get namespace hello-pr-1-abcd -L " + petriv1.LabelEnvironment,
		"get deploy,svc,ingress,pods -n hello-pr-1-abcd",
		"get sw -n " + ManagementNamespace,
	} {
		shown := strings.Index(text, "$ kubectl "+cmd+"\n")
		output := strings.Index(text, "out: "+cmd+"\n")
		require.GreaterOrEqual(t, shown, 0, "%q is shown:\n%s", cmd, text)
		assert.Greater(t, shown, last, "%q is shown in order:\n%s", cmd, text)
		assert.Greater(t, output, shown, "%q's output follows it:\n%s", cmd, text)
		last = output
	}
}

// The scenario opens its pull request only once the shared workload that
// the installation deploys at start is Ready, so that the open step times
// the pull request and not the installation's start.
func TestScenarioOpensThePullRequestOnceTheSharedWorkloadIsReady(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, petriv1.AddToScheme(scheme))
	sw := &petriv1.SharedWorkload{
		ObjectMeta: metav1.ObjectMeta{Namespace: ManagementNamespace, Name: demoSharedWorkload, Generation: 1},
		Status: petriv1.SharedWorkloadStatus{ObservedGeneration: 1, Phase: "Deploying", Conditions: []metav1.Condition{{
			Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "DeployProgressing", LastTransitionTime: metav1.Now(),
		}}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sw).WithStatusSubresource(sw).Build()
	var out bytes.Buffer
	s := &Stack{Client: c, Cluster: &controlplane.Cluster{}}
	sc := &Scenario{Stack: s, Report: NewReport(&out), StepTimeout: 300 * time.Millisecond}

	// Not Ready: no step is played (the GitHub stand-in, absent here, is
	// never asked to open the pull request).
	res, err := sc.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Shared workload "+demoSharedWorkload+" Ready")
	assert.Contains(t, err.Error(), `phase "Deploying"`)
	assert.Empty(t, res.Steps)
	assert.Empty(t, s.pulls.known)

	// Ready at its generation: the wait is over.
	sw.Status.Phase = "Ready"
	sw.Status.Conditions[0].Status, sw.Status.Conditions[0].Reason = metav1.ConditionTrue, "Succeeded"
	require.NoError(t, c.Status().Update(context.Background(), sw))
	require.NoError(t, sc.waitSharedWorkload(context.Background()))
	assert.Contains(t, out.String(), "ok Shared workload "+demoSharedWorkload+" Ready")
}
