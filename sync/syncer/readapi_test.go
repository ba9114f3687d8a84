package syncer_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/syncer"
)

// The read API serves what sync knows of each environment, the probes
// answer, and the metrics name webhooks, reconciles and GitHub's calls.
func TestReadAPIAndProbes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles("")})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}, HeadRef: "feat/x"})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.TargetNamespace = "shop-ns"
		e.Status.Components = []petriv1.ComponentStatus{{Name: "api", Phase: petriv1.ComponentDeployed, Generation: e.Generation}}
	})
	var one syncer.Environment
	require.Eventually(t, func() bool {
		return getJSON(t, h.url+api.EnvironmentsPath+"/"+name, &one) == http.StatusOK && one.Namespace == "shop-ns"
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "shop", one.Application)
	assert.Equal(t, pr.Number, one.PullRequest)
	assert.Equal(t, pr.HeadSHA, one.SHA)
	assert.Equal(t, "feat/x", one.Branch)
	assert.Equal(t, "Deploying", one.Phase)
	assert.Equal(t, []syncer.ComponentState{{Name: "api", Chart: "api", Version: "0.9.1", Phase: "Deployed"}, {Name: "web", Chart: "web", Version: "1.4.2", Phase: "Pending"}}, one.Components)
	var list struct{ Items []syncer.Environment }
	require.Equal(t, http.StatusOK, getJSON(t, h.url+api.EnvironmentsPath, &list))
	require.Len(t, list.Items, 1)
	assert.Equal(t, http.StatusNotFound, getJSON(t, h.url+api.EnvironmentsPath+"/nope", nil))
	assert.Equal(t, http.StatusOK, getJSON(t, h.url+"/healthz", nil))
	assert.Equal(t, http.StatusOK, getJSON(t, h.url+"/readyz", nil))

	resp, err := http.Get(h.url + "/metrics")
	require.NoError(t, err)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{
		`petri_sync_webhook_events_total{event="pull_request",result="queued"} 1`,
		`petri_sync_reconciles_total{result="success"}`,
		`petri_sync_github_requests_total{code="200",method="GET"}`,
		`petri_sync_github_rate_limit_remaining`,
		`petri_sync_environments{application="shop"} 1`,
		`petri_sync_webhook_to_write_seconds_count`,
	} {
		assert.Contains(t, string(data), m)
	}
}
