package security_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/client-go/rest"
)

// TestControllersAreServedAheadOfTheirJobs proves config/flowcontrol with the
// API server's own classification (API Priority and Fairness answers every
// request with the UIDs of the FlowSchema and priority level it was served
// by): the operator's and sync's Lease requests go to the leader-election
// priority level and their other requests to workload-high, ahead of a
// deployer Job's, which stay with every other ServiceAccount's at
// workload-low.
func TestControllersAreServedAheadOfTheirJobs(t *testing.T) {
	ctx := context.Background()
	names := map[string]string{}
	var schemas flowcontrolv1.FlowSchemaList
	require.NoError(t, cluster.Client.List(ctx, &schemas))
	for _, s := range schemas.Items {
		names[string(s.UID)] = "FlowSchema " + s.Name
	}
	var levels flowcontrolv1.PriorityLevelConfigurationList
	require.NoError(t, cluster.Client.List(ctx, &levels))
	for _, l := range levels.Items {
		names[string(l.UID)] = "priority level " + l.Name
	}

	for _, c := range []struct {
		ns, sa, method, path string
		schema, level        string
	}{
		{mgmtNS, "petri-operator", http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/" + mgmtNS + "/leases/petri-operator.petri.dev", "petri-leader-election", "leader-election"},
		{mgmtNS, "petri-operator", http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/" + mgmtNS + "/leases/petri-operator.petri.dev", "petri-leader-election", "leader-election"},
		{mgmtNS, "petri-operator", http.MethodGet, "/apis/batch/v1/namespaces/" + mgmtNS + "/jobs", "petri-controllers", "workload-high"},
		{mgmtNS, "petri-operator", http.MethodGet, "/api/v1/namespaces", "petri-controllers", "workload-high"},
		{syncNS, "petri-sync", http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/" + syncNS + "/leases/petri-sync", "petri-leader-election", "leader-election"},
		{syncNS, "petri-sync", http.MethodGet, "/apis/petri.dev/v1alpha1/namespaces/" + mgmtNS + "/ephemeralenvironments", "petri-controllers", "workload-high"},
		// A deployer Job is a workload like any other.
		{mgmtNS, deployerSA, http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/" + workloadNS + "/leases/petri-deployer", "service-accounts", "workload-low"},
		{mgmtNS, deployerSA, http.MethodGet, "/api/v1/namespaces/" + workloadNS + "/secrets", "service-accounts", "workload-low"},
	} {
		t.Run(c.sa+" "+c.method+" "+c.path, func(t *testing.T) {
			cfg, err := cluster.ServiceAccountConfig(ctx, c.ns, c.sa)
			require.NoError(t, err)
			hc, err := rest.HTTPClientFor(cfg)
			require.NoError(t, err)
			// The body of a PUT does not matter: the request is classified
			// before it is authorized or decoded.
			req, err := http.NewRequestWithContext(ctx, c.method, cfg.Host+c.path, http.NoBody)
			require.NoError(t, err)
			resp, err := hc.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, "FlowSchema "+c.schema, names[resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)], "HTTP %d", resp.StatusCode)
			assert.Equal(t, "priority level "+c.level, names[resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)], "HTTP %d", resp.StatusCode)
		})
	}
}
