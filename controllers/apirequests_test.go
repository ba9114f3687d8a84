package controllers_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	t.Parallel()
	jobsBefore := apiRequestCount(t, "create", "jobs")
	nsBefore := apiRequestCount(t, "create", "namespaces")
	statusBefore := apiRequestCount(t, "patch", "ephemeralenvironments/status")
	e := newEnv("apicount", component("one", imageCharts, "greeter", "0.1.0"), component("two", imageCharts, "greeter", "0.1.0", "one"))
	require.NoError(t, env.Client.Create(context.Background(), e))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), e)
		waitGone(t, e)
	})
	waitFor(t, e.Name, "Ready", ready)

	// Other tests run in parallel: at least this environment's requests.
	assert.GreaterOrEqual(t, apiRequestCount(t, "create", "jobs")-jobsBefore, 2.0)
	assert.GreaterOrEqual(t, apiRequestCount(t, "create", "namespaces")-nsBefore, 1.0)
	assert.GreaterOrEqual(t, apiRequestCount(t, "patch", "ephemeralenvironments/status")-statusBefore, 2.0)
	assert.Positive(t, apiRequestCount(t, "watch", "jobs"))
}

// reconcileCount is how many reconciles of environments the operator ran.
func reconcileCount(t *testing.T) float64 {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range fams {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "ephemeralenvironment" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// TestBoundNamespaceReadFromCache checks that the passes of a deployed
// environment find its bound namespace in the operator's cache instead of
// asking the API server each time: at a thousand environments those reads
// were a quarter of the operator's requests and a round trip on every pass.
func TestBoundNamespaceReadFromCache(t *testing.T) {
	ctx := context.Background()
	e := newEnv("nscache", component("one", imageCharts, "greeter", "0.1.0"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, e)
		waitGone(t, e)
	})
	waitFor(t, e.Name, "Ready", ready)

	gets := apiRequestCount(t, "get", "namespaces")
	passes := reconcileCount(t)
	for i := range 5 {
		cur := get(t, e.Name)
		patch := client.MergeFrom(cur.DeepCopy())
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations["test.petri.dev/poke"] = fmt.Sprint(i)
		require.NoError(t, env.Client.Patch(ctx, cur, patch))
		// Each change is a pass of its own.
		require.True(t, eventually(30*time.Second, func() bool { return reconcileCount(t) >= passes+float64(i+1) }), "no pass after change %d", i)
	}
	assert.Equal(t, 0.0, apiRequestCount(t, "get", "namespaces")-gets, "namespace reads from the API server in 5 passes of a bound environment")
	assert.True(t, ready(get(t, e.Name)))
}
