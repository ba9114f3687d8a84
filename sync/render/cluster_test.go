package render_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

// The application's placement is the environment's, as the API server
// stores it: the strategy defaulted, so an unchanged file is not written
// again.
func TestEnvironmentCarriesThePlacement(t *testing.T) {
	e, err := render.Environment(app(t, ""), pr(7, "preview"), "petri-system", map[string]string{"api": "1.4.2"})
	require.NoError(t, err)
	assert.Nil(t, e.Spec.Placement, "no placement: the management cluster")

	e, err = render.Environment(app(t, "placement: {cluster: east}\n"), pr(7, "preview"), "petri-system", map[string]string{"api": "1.4.2"})
	require.NoError(t, err)
	assert.Equal(t, &petriv1.Placement{Cluster: "east", Strategy: petriv1.PlacementLeastLoaded}, e.Spec.Placement)

	a := app(t, "placement: {selector: {matchLabels: {region: eu}}, strategy: Spread, requests: {cpu: 500m, memory: 1Gi}}\n")
	e, err = render.Environment(a, pr(7, "preview"), "petri-system", map[string]string{"api": "1.4.2"})
	require.NoError(t, err)
	p := e.Spec.Placement
	require.NotNil(t, p)
	assert.Equal(t, map[string]string{"region": "eu"}, p.Selector.MatchLabels)
	assert.Equal(t, petriv1.PlacementSpread, p.Strategy)
	require.NotNil(t, p.Requests)
	assert.Equal(t, "500m", p.Requests.CPU.String())
	assert.Equal(t, "1Gi", p.Requests.Memory.String())
	p.Selector.MatchLabels["region"] = "us"
	assert.Equal(t, "eu", a.Placement.Selector.MatchLabels["region"], "the environment has a copy, not the application's")

	assert.Nil(t, render.Placement(&petriv1.Placement{Cluster: "east", Requests: &petriv1.PlacementRequests{}}).Requests, "empty requests are left out")
}

func TestCluster(t *testing.T) {
	placed := &petriv1.Placement{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
	cpu := resource.MustParse("1")
	tests := []struct {
		name      string
		placement *petriv1.Placement
		namespace string
		cluster   string
		want      string
	}{
		{"no placement, not bound yet", nil, "", "", render.ClusterManagement},
		{"no placement, bound", nil, "shop-pr-1-ab", "", render.ClusterManagement},
		{"a placement, not placed yet", placed, "", "", render.ClusterPending},
		{"a placement, placed in a workload cluster", placed, "shop-pr-1-ab", "east", "east"},
		{"a placement added after it was bound: it stays where it is", &petriv1.Placement{Cluster: "east", Requests: &petriv1.PlacementRequests{CPU: &cpu}}, "shop-pr-1-ab", "", render.ClusterManagement},
		{"a cluster without a placement (written by hand)", nil, "shop-pr-1-ab", "west", "west"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := env(1, 1, petriv1.EnvironmentDeploying, "")
			e.Spec.Placement = tt.placement
			e.Status.TargetNamespace, e.Status.Cluster = tt.namespace, tt.cluster
			assert.Equal(t, tt.want, render.Cluster(e))
		})
	}
}

// The comment says which cluster the environment runs in: a workload
// cluster by its name, the management cluster, or that it waits for its
// placement.
func TestCommentShowsTheCluster(t *testing.T) {
	e := env(1, 1, petriv1.EnvironmentReady, metav1.ConditionTrue)
	e.Status.TargetNamespace, e.Status.Cluster = "shop-pr-1-x", "east"
	body := render.Comment([]render.PRState{{Application: "shop", Env: e}}, render.State{})
	assert.Contains(t, body, "- Namespace: `shop-pr-1-x`\n- Cluster: `east`\n- Environment: `shop-pr-1-abcdef`")

	e = env(1, 0, petriv1.EnvironmentPending, "")
	e.Spec.Placement = &petriv1.Placement{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
	body = render.Comment([]render.PRState{{Application: "shop", Env: e}}, render.State{})
	assert.Contains(t, body, "- Namespace: (not assigned yet)\n- Cluster: pending placement\n")
}
