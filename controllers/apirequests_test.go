package controllers_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/petri-dev/petri/controllers"
)

func TestRequestKind(t *testing.T) {
	for _, tc := range []struct {
		method, url, verb, resource string
	}{
		{"GET", "/api/v1/namespaces/petri-x-1a2b", "get", "namespaces"},
		{"POST", "/api/v1/namespaces", "create", "namespaces"},
		{"DELETE", "/api/v1/namespaces/petri-x-1a2b", "delete", "namespaces"},
		{"PUT", "/api/v1/namespaces/petri-x-1a2b/finalize", "update", "namespaces/finalize"},
		{"GET", "/api/v1/namespaces/petri-x-1a2b/status", "get", "namespaces/status"},
		{"GET", "/apis/batch/v1/namespaces/petri-system/jobs?labelSelector=a%3Db", "list", "jobs"},
		{"GET", "/apis/batch/v1/namespaces/petri-system/jobs?watch=true&resourceVersion=5", "watch", "jobs"},
		{"GET", "/apis/batch/v1/namespaces/petri-system/jobs/deploy-web", "get", "jobs"},
		{"POST", "/apis/batch/v1/namespaces/petri-system/jobs", "create", "jobs"},
		{"PATCH", "/apis/petri.dev/v1alpha1/namespaces/petri-system/ephemeralenvironments/web-pr-1/status", "patch", "ephemeralenvironments/status"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/petri-system/leases/petri-operator.petri.dev", "update", "leases"},
		{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "create", "subjectaccessreviews"},
		{"DELETE", "/api/v1/namespaces/petri-system/secrets", "deletecollection", "secrets"},
		{"GET", "/api/v1/secrets", "list", "secrets"},
		{"GET", "/apis", "get", "nonresource"},
		{"GET", "/version", "get", "nonresource"},
	} {
		verb, resource := controllers.RequestKind(httptest.NewRequest(tc.method, tc.url, nil))
		assert.Equal(t, tc.verb, verb, "%s %s", tc.method, tc.url)
		assert.Equal(t, tc.resource, resource, "%s %s", tc.method, tc.url)
	}
}

// apiRequestCount reads petri_api_requests_total for one verb and resource
// from the registry the operator's metrics endpoint serves.
func apiRequestCount(t *testing.T, verb, resource string) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != "petri_api_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["verb"] == verb && labels["resource"] == resource {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestAPIRequestsCounted checks that the operator built by NewManager counts
// its requests: an environment of two components costs two Job creates, a
// namespace create and status patches, and the Job watch is counted too.
func TestAPIRequestsCounted(t *testing.T) {
	jobsBefore := apiRequestCount(t, "create", "jobs")
	nsBefore := apiRequestCount(t, "create", "namespaces")
	statusBefore := apiRequestCount(t, "patch", "ephemeralenvironments/status")
	e := newEnv("apicount", component("one", imageCharts, "greeter", "0.1.0"), component("two", imageCharts, "greeter", "0.1.0", "one"))
	require.NoError(t, env.Client.Create(context.Background(), e))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), e) })
	waitFor(t, e.Name, "Ready", ready)

	// Other tests run in parallel: at least this environment's requests.
	assert.GreaterOrEqual(t, apiRequestCount(t, "create", "jobs")-jobsBefore, 2.0)
	assert.GreaterOrEqual(t, apiRequestCount(t, "create", "namespaces")-nsBefore, 1.0)
	assert.GreaterOrEqual(t, apiRequestCount(t, "patch", "ephemeralenvironments/status")-statusBefore, 2.0)
	assert.Positive(t, apiRequestCount(t, "watch", "jobs"))
}
