package node_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// connectThrough sends "CONNECT target" to the proxy and returns the
// connection and the proxy's status line.
func connectThrough(t *testing.T, proxy, target string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(proxy, "http://"), 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return conn, br, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return conn, br, "200"
}

// A TCP client reaches a Service by its cluster name through the node's
// proxy (CONNECT NAME.NAMESPACE.svc:PORT), the way a database driver dials
// through HTTP_PROXY; other hosts are refused.
func TestConnectTunnelsToAService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	labels := map[string]string{"app": "tcp"}
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tcp"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:    "server",
					Image:   helperImage + ":v1",
					Command: []string{"/petri-testhelper"},
					Args:    []string{"serve", "--listen=:5432"},
					Ports:   []corev1.ContainerPort{{Name: "db", ContainerPort: 5432}},
				}}},
			},
		},
	}))
	require.NoError(t, env.Client.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "db", Port: 5432, TargetPort: intstr.FromString("db")}}},
	}))
	proxy := httptest.NewServer(env.Node.ServiceProxy())
	defer proxy.Close()

	target := "db." + ns + ".svc:5432"
	require.Eventually(t, func() bool {
		var d appsv1.Deployment
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tcp"}, &d) == nil && d.Status.AvailableReplicas == 1
	}, 30*time.Second, 50*time.Millisecond)

	// Without a readiness probe the pod is Ready once started, as a
	// kubelet has it, which can be before the server listens: the first
	// tunnels may find nothing there yet.
	var (
		conn   net.Conn
		br     *bufio.Reader
		status string
	)
	require.Eventually(t, func() bool {
		conn, br, status = connectThrough(t, proxy.URL, target)
		return status == "200"
	}, 30*time.Second, 50*time.Millisecond, "the tunnel never answered 200")
	// Raw bytes through the tunnel: the server answers its own protocol.
	_, err := fmt.Fprintf(conn, "GET /through HTTP/1.1\r\nHost: raw\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	assert.Contains(t, string(body), "path /through host raw")
	_ = conn.Close()

	_, _, status = connectThrough(t, proxy.URL, "example.com:443")
	assert.True(t, strings.HasPrefix(status, "400 "), "only Service hosts are tunnelled: %s", status)
	_, _, status = connectThrough(t, proxy.URL, "none."+ns+".svc:5432")
	assert.True(t, strings.HasPrefix(status, "503 "), "an unknown Service: %s", status)
}
