package node_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/node"
)

// A Deployment's pods each get their own local port, become Ready only when
// their readiness probe passes, and are reached by Service name through the
// node's proxy (as another pod does) and through an Ingress rule.
func TestServicesIngressAndReadiness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	readyFile := filepath.Join(scratch, ns+"-ready")
	labels := map[string]string{"app": "web"}
	createWeb(t, ns, labels, readyFile)

	running := func() []corev1.Pod {
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return nil
		}
		var out []corev1.Pod
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && len(node.PodPorts(&p)) == 1 {
				out = append(out, p)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(running()) == 2 }, 30*time.Second, 50*time.Millisecond)
	pods := running()
	assert.NotEqual(t, node.PodPorts(&pods[0])[8080], node.PodPorts(&pods[1])[8080], "each pod listens on its own local port")
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				assert.Equal(t, corev1.ConditionFalse, c.Status, "pod %s is not ready while its probe fails", p.Name)
			}
		}
	}
	var dep appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	assert.Zero(t, dep.Status.AvailableReplicas)

	require.NoError(t, os.WriteFile(readyFile, nil, 0o644))
	require.Eventually(t, func() bool {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep)
		return err == nil && dep.Status.AvailableReplicas == 2
	}, 30*time.Second, 50*time.Millisecond, "the Deployment becomes available once the probes pass")

	// Another pod reaches the Service by its cluster DNS name.
	require.NoError(t, env.Client.Create(ctx, job(ns, "fetch", "fetch", "--termination-log=/dev/termination-log", "http://web."+ns+".svc.cluster.local/hello")))
	require.Eventually(t, func() bool { return jobCondition(ctx, ns, "fetch")() == batchv1.JobComplete }, 30*time.Second, 50*time.Millisecond)
	msg := jobPods(ns, "fetch")[0].Status.ContainerStatuses[0].State.Terminated.Message
	assert.Regexp(t, `^pod web-[-a-z0-9]+ path /hello host web\.`+ns+`\.svc\.cluster\.local$`, msg)

	// The ingress routes by host and keeps the path.
	checkIngress(t, ns)
}

// createWeb creates the Deployment "web" of two pods serving on their port
// 8080 (ready once readyFile exists), its Service and an Ingress rule for
// the host <ns>.example.test.
func createWeb(t *testing.T, ns string, labels map[string]string, readyFile string) {
	t.Helper()
	ctx := context.Background()
	replicas := int32(2)
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:    "web",
					Image:   helperImage + ":v1",
					Command: []string{"/petri-testhelper"},
					Args:    []string{"serve", "--listen=:8080", "--ready-file=" + readyFile},
					Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")},
					}},
				}}},
			},
		},
	}))
	require.NoError(t, env.Client.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}))
	prefix := networkingv1.PathTypePrefix
	require.NoError(t, env.Client.Create(ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: ns + ".example.test",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}},
			}}}},
		}}},
	}))
}

// checkIngress asks the node's ingress for <ns>.example.test/a/b, answered
// by a pod of "web", and for an unknown host, answered 404.
func checkIngress(t *testing.T, ns string) {
	t.Helper()
	ingress := httptest.NewServer(env.Node.Ingress())
	defer ingress.Close()
	req, err := http.NewRequest(http.MethodGet, ingress.URL+"/a/b", nil)
	require.NoError(t, err)
	req.Host = ns + ".example.test"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "path /a/b host "+ns+".example.test")

	req.Host = "unknown.example.test"
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}
