package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/petri-dev/petri/local/internal/ingress"
)

// AnnotationPorts records on a pod where its container ports are on this
// machine: "8080=41234,8081=41235" (containerPort=local port on 127.0.0.1).
const AnnotationPorts = "localnode.petri.dev/ports"

// ErrNoEndpoints is returned when a Service has no ready pod on this node.
var ErrNoEndpoints = errors.New("no ready pod behind the service")

// allocatePorts gives every TCP containerPort of the pod a free port on
// 127.0.0.1. Pods share the machine's network here, so two pods cannot both
// listen on 8080.
func allocatePorts(pod *corev1.Pod) (map[int32]int32, error) {
	ports := map[int32]int32{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
				continue
			}
			if _, ok := ports[p.ContainerPort]; ok {
				continue
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, fmt.Errorf("allocate a local port for container port %d: %w", p.ContainerPort, err)
			}
			ports[p.ContainerPort] = int32(l.Addr().(*net.TCPAddr).Port)
			_ = l.Close()
		}
	}
	return ports, nil
}

func formatPorts(ports map[int32]int32) string {
	keys := make([]int, 0, len(ports))
	for k := range ports {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d=%d", k, ports[int32(k)]))
	}
	return strings.Join(parts, ",")
}

// PodPorts reads the port mapping the node recorded on a pod.
func PodPorts(pod *corev1.Pod) map[int32]int32 {
	out := map[int32]int32{}
	for _, kv := range strings.Split(pod.Annotations[AnnotationPorts], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		from, err1 := strconv.ParseInt(k, 10, 32)
		to, err2 := strconv.ParseInt(v, 10, 32)
		if err1 == nil && err2 == nil {
			out[int32(from)] = int32(to)
		}
	}
	return out
}

// listenAddress matches the address forms a server is told to listen on:
// ":8080", "0.0.0.0:8080", "[::]:8080", "127.0.0.1:8080", "localhost:8080".
var listenAddress = regexp.MustCompile(`^(|0\.0\.0\.0|\[::\]|127\.0\.0\.1|localhost):([0-9]{1,5})$`)

// rewriteAddress maps a listen address on a declared container port (alone
// or as the value of --flag=ADDRESS) to the pod's local port.
func rewriteAddress(v string, ports map[int32]int32) string {
	if len(ports) == 0 {
		return v
	}
	prefix, addr := "", v
	if i := strings.LastIndex(v, "="); i >= 0 {
		prefix, addr = v[:i+1], v[i+1:]
	}
	m := listenAddress.FindStringSubmatch(addr)
	if m == nil {
		return v
	}
	port, err := strconv.ParseInt(m[2], 10, 32)
	if err != nil {
		return v
	}
	local, ok := ports[int32(port)]
	if !ok {
		return v
	}
	return fmt.Sprintf("%s127.0.0.1:%d", prefix, local)
}

// containerPort resolves a probe's or Service's port (a number or the name of
// a container port) to a container port number.
func containerPort(pod *corev1.Pod, port intstr.IntOrString) (int32, bool) {
	if port.Type == intstr.Int {
		return port.IntVal, true
	}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				return p.ContainerPort, true
			}
		}
	}
	return 0, false
}

// ServiceAddress finds a ready pod of this node behind the Service's port
// and returns the local address that reaches it, the way kube-proxy would
// pick an endpoint.
func (n *Node) ServiceAddress(ctx context.Context, namespace, name string, port intstr.IntOrString) (string, error) {
	svc, err := n.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("service %s/%s: %w", namespace, name, err)
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if (port.Type == intstr.Int && (p.Port == port.IntVal || port.IntVal == 0 && len(svc.Spec.Ports) == 1)) ||
			(port.Type == intstr.String && p.Name == port.StrVal) {
			sp = p
			break
		}
	}
	if sp == nil {
		return "", fmt.Errorf("service %s/%s has no port %s", namespace, name, port.String())
	}
	target := sp.TargetPort
	if target.Type == intstr.Int && target.IntVal == 0 {
		target = intstr.FromInt32(sp.Port)
	}
	if len(svc.Spec.Selector) == 0 {
		return "", fmt.Errorf("service %s/%s: %w (it has no selector)", namespace, name, ErrNoEndpoints)
	}
	pods, err := n.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String(),
	})
	if err != nil {
		return "", fmt.Errorf("pods of service %s/%s: %w", namespace, name, err)
	}
	var addrs []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != n.opts.Name || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(p) {
			continue
		}
		cp, ok := containerPort(p, target)
		if !ok {
			continue
		}
		if local, ok := PodPorts(p)[cp]; ok {
			addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", local))
		}
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("service %s/%s port %s: %w", namespace, name, port.String(), ErrNoEndpoints)
	}
	sort.Strings(addrs)
	return addrs[int(n.roundRobin.Add(1))%len(addrs)], nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serviceHost splits NAME.NAMESPACE.svc[.cluster.local] into its parts.
func serviceHost(host string) (namespace, name string, ok bool) {
	host = strings.TrimSuffix(strings.TrimSuffix(host, "."), ".cluster.local")
	rest, found := strings.CutSuffix(host, ".svc")
	if !found {
		return "", "", false
	}
	name, namespace, ok = strings.Cut(rest, ".")
	if !ok || name == "" || namespace == "" || strings.Contains(namespace, ".") {
		return "", "", false
	}
	return namespace, name, true
}

// ServiceProxy is the HTTP proxy the node puts in every process's
// HTTP_PROXY: a request for http://NAME.NAMESPACE.svc[:PORT]/ goes to a ready
// pod behind that Service (port 80 when none is given); any other host is
// reached directly. Loopback addresses never go through a proxy (Go's and
// curl's rule), so the API server and local test servers are unaffected.
func (n *Node) ServiceProxy() http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = r.In.Context().Value(upstreamKey{}).(string)
			r.Out.Host = r.In.Host
		},
		ErrorHandler: proxyError,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			n.connect(w, r)
			return
		}
		if !r.URL.IsAbs() || r.URL.Scheme != "http" {
			http.Error(w, "local node proxy: only http://host/path requests are proxied", http.StatusBadRequest)
			return
		}
		addr := r.URL.Host
		if ns, name, ok := serviceHost(r.URL.Hostname()); ok {
			port := intstr.FromInt32(80)
			if p := r.URL.Port(); p != "" {
				v, err := strconv.ParseInt(p, 10, 32)
				if err != nil {
					http.Error(w, "local node proxy: bad port "+p, http.StatusBadRequest)
					return
				}
				port = intstr.FromInt32(int32(v))
			}
			var err error
			if addr, err = n.ServiceAddress(r.Context(), ns, name, port); err != nil {
				http.Error(w, "local node proxy: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamKey{}, addr)))
	})
}

// connect tunnels "CONNECT NAME.NAMESPACE.svc:PORT" to a ready pod behind
// that Service: how a TCP client (a database driver) reaches a Service here,
// where pods share the machine's network and there is no cluster DNS.
// Clients take the proxy from HTTP_PROXY, as they take it for HTTP. Only
// Service hosts are tunnelled.
func (n *Node) connect(w http.ResponseWriter, r *http.Request) {
	host, portText, err := net.SplitHostPort(r.Host)
	ns, name, ok := serviceHost(host)
	if err != nil || !ok {
		http.Error(w, "local node proxy: CONNECT reaches only NAME.NAMESPACE.svc:PORT, not "+r.Host, http.StatusBadRequest)
		return
	}
	port, err := strconv.ParseInt(portText, 10, 32)
	if err != nil {
		http.Error(w, "local node proxy: bad port "+portText, http.StatusBadRequest)
		return
	}
	addr, err := n.ServiceAddress(r.Context(), ns, name, intstr.FromInt32(int32(port)))
	if err != nil {
		http.Error(w, "local node proxy: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	upstream, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(r.Context(), "tcp", addr)
	if err != nil {
		http.Error(w, "local node proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "local node proxy: cannot tunnel this connection", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	defer conn.Close()
	defer upstream.Close()
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		// Bytes the client sent after the request line are buffered in rw.
		_, _ = io.Copy(upstream, rw)
		if tc, ok := upstream.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(conn, upstream)
	_ = conn.Close()
	<-done
}

// upstreamKey carries the resolved upstream address from the handler to the
// reverse proxy's Rewrite.
type upstreamKey struct{}

func proxyError(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, "local node proxy: "+err.Error(), http.StatusBadGateway)
}

// startProxy listens on a loopback port for the service proxy and returns
// its URL.
func (n *Node) startProxy(ctx context.Context) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("service proxy: %w", err)
	}
	srv := &http.Server{Handler: n.ServiceProxy(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return "http://" + l.Addr().String(), nil
}

// ProxyURL is the URL of the service proxy once Run has started; processes
// find it in HTTP_PROXY.
func (n *Node) ProxyURL() string {
	v, _ := n.proxyURL.Load().(string)
	return v
}

// Ingress serves the cluster's Ingress objects the way an ingress
// controller does (local/internal/ingress), proxying to a ready pod of this
// node behind the rule's Service.
func (n *Node) Ingress() http.Handler {
	return ingress.Handler(n.client, n.ServiceAddress)
}

// annotatePorts records the pod's port mapping where Services, the ingress
// and people (kubectl get pod -o yaml) find it.
func (n *Node) annotatePorts(ctx context.Context, pod *corev1.Pod, ports map[int32]int32) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationPorts, formatPorts(ports))
	updated, err := n.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("record ports of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	pod.Annotations = updated.Annotations
	return nil
}
