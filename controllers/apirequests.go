package controllers

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// apiRequests counts every request the operator sends to the API server, by
// Kubernetes verb and resource (with its subresource), so that the cost of
// an environment's life can be read off the metrics endpoint and compared
// across releases (make bench reports it per environment).
var apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "petri_api_requests_total",
	Help: "Requests the operator sent to the API server, by verb (get, list, watch, create, update, patch, delete, deletecollection) and resource (resource/subresource).",
}, []string{"verb", "resource"})

func init() {
	metrics.Registry.MustRegister(apiRequests)
}

// countAPIRequests wraps a REST config's transport so that every request,
// retries included, is counted in petri_api_requests_total.
func countAPIRequests(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			verb, resource := requestKind(req)
			apiRequests.WithLabelValues(verb, resource).Inc()
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requestKind derives the Kubernetes verb and resource of a request from its
// method and path, the way the API server's request info does for the paths
// a client sends: /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUBRESOURCE]] and
// the same under /apis/GROUP/VERSION. Anything else (discovery, /version) is
// resource "nonresource".
func requestKind(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(req.Method), "nonresource"
	}
	if len(parts) == 0 {
		return strings.ToLower(req.Method), "nonresource"
	}
	// A namespace's own subresources (status, finalize) sit where a
	// namespaced resource's name would.
	if parts[0] == "namespaces" && len(parts) >= 3 && !(len(parts) == 3 && (parts[2] == "status" || parts[2] == "finalize")) {
		parts = parts[2:]
	}
	resource = parts[0]
	named := len(parts) >= 2
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(req.Method)
	}
	return verb, resource
}
