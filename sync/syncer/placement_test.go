package syncer_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/syncer"
)

const selectorPlacement = `placement:
  selector:
    matchLabels: {region: eu}
  strategy: Spread
  requests: {cpu: 500m, memory: 1Gi}
`

// The application's placement is written into its environments'
// spec.placement; the comment and the read API show where each one runs.
// A change of the file changes the spec of an environment already placed,
// never its cluster: the operator reads a placement once.
func TestPlacementReachesTheEnvironments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{files: shopFiles(selectorPlacement)})
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	e := h.waitEnv(name, nil)
	p := e.Spec.Placement
	require.NotNil(t, p, "the rendered environment carries the placement")
	require.NotNil(t, p.Selector)
	assert.Equal(t, map[string]string{"region": "eu"}, p.Selector.MatchLabels)
	assert.Empty(t, p.Cluster)
	assert.Equal(t, petriv1.PlacementSpread, p.Strategy)
	require.NotNil(t, p.Requests)
	assert.Equal(t, "500m", p.Requests.CPU.String())
	assert.Equal(t, "1Gi", p.Requests.Memory.String())
	h.waitComment(pr.Number, "- Cluster: pending placement\n")

	// The stored placement (defaulted by the API server) is what sync
	// renders: a resync writes nothing.
	updates := func() float64 {
		return testutil.ToFloat64(h.m.Writes.WithLabelValues("EphemeralEnvironment", "update"))
	}
	before := updates()
	h.resync()
	again, err := h.get(name)
	require.NoError(t, err)
	assert.Equal(t, e.ResourceVersion, again.ResourceVersion, "an unchanged placement is not written again")
	assert.Equal(t, before, updates())

	// The operator (played by the test) places it in east.
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.TargetNamespace, e.Status.Cluster = "shop-pr-x-ab12", "east"
	})
	h.waitComment(pr.Number, "- Namespace: `shop-pr-x-ab12`\n- Cluster: `east`\n")
	var one syncer.Environment
	require.Eventually(t, func() bool {
		return getJSON(t, h.url+api.EnvironmentsPath+"/"+name, &one) == http.StatusOK && one.Cluster == "east"
	}, 10*time.Second, 10*time.Millisecond, "the read API names the cluster; last %+v", one)

	// The file now names another cluster: the spec follows, the
	// environment stays where it was placed.
	h.pushConfig(shopFiles("placement: {cluster: west}\n"))
	e = h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool {
		return e.Spec.Placement != nil && e.Spec.Placement.Cluster == "west"
	})
	assert.Nil(t, e.Spec.Placement.Selector, "sync's apply drops the selector it no longer writes")
	assert.Nil(t, e.Spec.Placement.Requests)
	assert.Equal(t, petriv1.PlacementLeastLoaded, e.Spec.Placement.Strategy, "the CRD's default, as sync renders it")
	assert.Equal(t, "east", e.Status.Cluster)
	assert.Contains(t, h.comment(pr.Number), "- Cluster: `east`\n")

	// Without a placement in the file, the spec has none; a new pull
	// request's environment runs in the management cluster.
	h.pushConfig(shopFiles(""))
	h.waitEnv(name, func(e *petriv1.EphemeralEnvironment) bool { return e.Spec.Placement == nil })
	next := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	h.waitEnv(envName(next.Number), nil)
	h.waitComment(next.Number, "- Cluster: "+render.ClusterManagement+"\n")
}
