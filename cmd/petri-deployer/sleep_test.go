package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
)

// sleep and wake as a Job runs them: the example chart's Deployment goes to
// zero with its count recorded, and back to exactly that count.
func TestBinarySleepAndWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	res := runDeployer(t, env.Kubeconfig, "deploy", "--release", "web", "--namespace", ns,
		"--chart-repository", charts, "--chart-name", "greeter", "--chart-version", "0.1.0",
		"--values", valuesFile(t, "replicas: 2\n"))
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	deployment := func() (int32, string) {
		var d appsv1.Deployment
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-greeter"}, &d))
		v, ok := d.Annotations[contract.AnnotationReplicasBeforeSleep]
		if !ok {
			v = "<none>"
		}
		return *d.Spec.Replicas, v
	}
	replicas, recorded := deployment()
	require.Equal(t, int32(2), replicas)
	require.Equal(t, "<none>", recorded)

	for range 2 { // the second time there is nothing to do
		res = runDeployer(t, env.Kubeconfig, "sleep", "--namespace", ns)
		require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
		assert.Equal(t, "<absent>", res.terminationLog)
		replicas, recorded = deployment()
		assert.Equal(t, int32(0), replicas)
		assert.Equal(t, "2", recorded)
	}
	assert.Contains(t, res.stdout, `"msg":"Done","command":"sleep","namespace":"`+ns+`","scaled":[]`)

	res = runDeployer(t, env.Kubeconfig, "wake", "--namespace", ns, "--timeout", "1m")
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stdout, `"scaled":["Deployment web-greeter 0 -> 2"]`)
	replicas, recorded = deployment()
	assert.Equal(t, int32(2), replicas)
	assert.Equal(t, "<none>", recorded)
}

func TestBinarySleepAndWakeReportFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}))
	nobody := serviceAccountKubeconfig(t, ns, "nobody")
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "petri.dev/nowhere:1"}}},
			},
		},
	}))

	tests := []struct {
		name       string
		kubeconfig string
		args       []string
		code       int
		message    string
		reason     contract.Reason
	}{
		{
			name: "no namespace", args: []string{"sleep"},
			code: 2, message: "InvalidArguments: sleep --namespace required", reason: contract.ReasonInvalidArguments,
		},
		{
			name: "sleep takes no release", args: []string{"sleep", "--namespace", ns, "--release", "web"},
			code: 2, message: "InvalidArguments: flag provided but not defined: -release", reason: contract.ReasonInvalidArguments,
		},
		{
			name: "no rights in the namespace", kubeconfig: nobody, args: []string{"sleep", "--namespace", ns},
			code: 1, message: `KubernetesRefused: sleep ` + ns + `: list Deployments in ` + ns + `: deployments.apps is forbidden: User "system:serviceaccount:` + ns + `:nobody" cannot list resource "deployments"`, reason: contract.ReasonKubernetesRefused,
		},
		{
			name: "not ready in time", args: []string{"wake", "--namespace", ns, "--wait", "--timeout", "1s"},
			code: 1, message: "Timeout: wake " + ns + ": workloads not ready within 1s: Deployment web (0 of 1 available)", reason: contract.ReasonTimeout,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kubeconfig := tt.kubeconfig
			if kubeconfig == "" {
				kubeconfig = env.Kubeconfig
			}
			res := runDeployer(t, kubeconfig, tt.args...)
			assert.Equal(t, tt.code, res.code, "stdout:\n%s\nstderr:\n%s", res.stdout, res.stderr)
			got := res.decoded(t)
			assert.Equal(t, contract.OutcomeFailed, got.Outcome)
			assert.Equal(t, tt.reason, got.Reason)
			assert.Equal(t, tt.reason.Retryable(), got.Retryable)
			assert.True(t, strings.HasPrefix(got.Message, tt.message), "message %q does not start with %q", got.Message, tt.message)
		})
	}
}
