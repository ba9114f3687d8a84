// Package ingress serves a cluster's Ingress objects on this machine the way
// an ingress controller does, for both local nodes: a request is matched by
// host and path against every Ingress rule (any class) and proxied to the
// address the node gives for the rule's Service (a pod's local port on the
// process node, the Service's cluster IP on the real node). Exact paths win
// over prefixes, longer prefixes over shorter; an exact host over a
// wildcard, a wildcard over a rule for any host.
package ingress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Resolve returns the address (host:port) that serves a Service's port
// (by number or name) in a namespace.
type Resolve func(ctx context.Context, namespace, service string, port intstr.IntOrString) (string, error)

type upstreamKey struct{}

// Handler serves the Ingress rules of the cluster client reads, proxying
// to what resolve returns.
func Handler(c kubernetes.Interface, resolve Resolve) http.Handler {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = r.In.Context().Value(upstreamKey{}).(string)
			r.SetXForwarded()
			r.Out.Host = r.In.Host
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "local ingress: "+err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		backend, ns, err := Match(r.Context(), c, r.Host, r.URL.Path)
		if err != nil {
			http.Error(w, "local ingress: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if backend == nil {
			http.Error(w, fmt.Sprintf("local ingress: no Ingress rule for host %q path %q", r.Host, r.URL.Path), http.StatusNotFound)
			return
		}
		port := intstr.FromInt32(backend.Port.Number)
		if backend.Port.Name != "" {
			port = intstr.FromString(backend.Port.Name)
		}
		addr, err := resolve(r.Context(), ns, backend.Name, port)
		if err != nil {
			http.Error(w, "local ingress: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), upstreamKey{}, addr)))
	})
}

// Match finds the Service backend of the best rule for host and path, and
// the Ingress's namespace; nil when no rule matches.
func Match(ctx context.Context, c kubernetes.Interface, host, path string) (*networkingv1.IngressServiceBackend, string, error) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	list, err := c.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("list ingresses: %w", err)
	}
	type candidate struct {
		backend *networkingv1.IngressServiceBackend
		ns      string
		score   int
		uid     types.UID
	}
	var best *candidate
	consider := func(c candidate) {
		if best == nil || c.score > best.score || c.score == best.score && c.uid < best.uid {
			best = &c
		}
	}
	for i := range list.Items {
		ing := &list.Items[i]
		if ing.DeletionTimestamp != nil {
			continue
		}
		for _, rule := range ing.Spec.Rules {
			hostScore, ok := matchHost(rule.Host, host)
			if !ok || rule.HTTP == nil {
				continue
			}
			for _, p := range rule.HTTP.Paths {
				pathScore, ok := matchPath(p, path)
				if !ok || p.Backend.Service == nil {
					continue
				}
				consider(candidate{backend: p.Backend.Service, ns: ing.Namespace, score: hostScore*100000 + pathScore, uid: ing.UID})
			}
		}
		if len(ing.Spec.Rules) == 0 && ing.Spec.DefaultBackend != nil && ing.Spec.DefaultBackend.Service != nil {
			consider(candidate{backend: ing.Spec.DefaultBackend.Service, ns: ing.Namespace, score: 0, uid: ing.UID})
		}
	}
	if best == nil {
		return nil, "", nil
	}
	return best.backend, best.ns, nil
}

// matchHost scores an Ingress rule host: exact 3, wildcard 2, any 1.
func matchHost(rule, host string) (int, bool) {
	switch {
	case rule == "":
		return 1, true
	case strings.EqualFold(rule, host):
		return 3, true
	case strings.HasPrefix(rule, "*."):
		first, rest, ok := strings.Cut(host, ".")
		return 2, ok && first != "" && strings.EqualFold(rest, rule[2:])
	}
	return 0, false
}

// matchPath scores an Ingress path: an exact match beats any prefix, and a
// longer prefix beats a shorter one. Prefix matching is element-wise.
func matchPath(p networkingv1.HTTPIngressPath, path string) (int, bool) {
	want := p.Path
	if want == "" {
		want = "/"
	}
	if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
		return 2*len(want) + 1, path == want
	}
	prefix := strings.TrimSuffix(want, "/")
	if prefix == "" || path == prefix || strings.HasPrefix(path, prefix+"/") {
		return 2 * len(prefix), true
	}
	return 0, false
}
