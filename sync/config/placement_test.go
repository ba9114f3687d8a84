package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
)

// withPlacement is the good application with a placement block at its end
// (its block from line 27).
func withPlacement(block string) string { return good + "placement:\n" + block }

func TestPlacementLoads(t *testing.T) {
	cpu, mem := resource.MustParse("500m"), resource.MustParse("1Gi")
	tests := []struct {
		name  string
		block string
		want  *petriv1.Placement
	}{
		{"a named cluster", "  cluster: east\n", &petriv1.Placement{Cluster: "east"}},
		{"a selector, its strategy and requests", "  selector:\n    matchLabels: {region: eu}\n  strategy: Spread\n  requests: {cpu: 500m, memory: 1Gi}\n",
			&petriv1.Placement{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}, Strategy: petriv1.PlacementSpread,
				Requests: &petriv1.PlacementRequests{CPU: &cpu, Memory: &mem}}},
		{"expressions, the default strategy, a number of CPUs", "  selector:\n    matchExpressions:\n      - {key: tier, operator: In, values: [preview, dev]}\n      - {key: petri.dev/cordon, operator: DoesNotExist}\n  requests: {cpu: 0.5}\n",
			&petriv1.Placement{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"preview", "dev"}},
				{Key: "petri.dev/cordon", Operator: metav1.LabelSelectorOpDoesNotExist},
			}}, Requests: &petriv1.PlacementRequests{CPU: &cpu}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Load(map[string][]byte{"apps/x.yaml": []byte(withPlacement(tt.block))})
			require.Empty(t, cfg.Errors)
			got := cfg.Applications[0].Placement
			require.NotNil(t, got)
			assert.Equal(t, tt.want.Cluster, got.Cluster)
			assert.Equal(t, tt.want.Selector, got.Selector)
			assert.Equal(t, tt.want.Strategy, got.Strategy)
			if tt.want.Requests == nil {
				assert.Nil(t, got.Requests)
				return
			}
			require.NotNil(t, got.Requests)
			for _, q := range [][2]*resource.Quantity{{tt.want.Requests.CPU, got.Requests.CPU}, {tt.want.Requests.Memory, got.Requests.Memory}} {
				if q[0] == nil {
					assert.Nil(t, q[1])
					continue
				}
				require.NotNil(t, q[1])
				assert.Zero(t, q[0].Cmp(*q[1]), "want %s, got %s", q[0], q[1])
			}
		})
	}

	cfg := config.Load(map[string][]byte{"apps/x.yaml": []byte(good)})
	require.Empty(t, cfg.Errors)
	assert.Nil(t, cfg.Applications[0].Placement, "no placement: the management cluster")

	// Shared workloads go with an application to its cluster: the operator
	// deploys them there.
	cfg = config.Load(map[string][]byte{"apps/x.yaml": []byte(withPlacement("  cluster: east\nsharedWorkloads: [postgres]\n"))})
	require.Empty(t, cfg.Errors)
	assert.Equal(t, "east", cfg.Applications[0].Placement.Cluster)
	assert.Equal(t, []string{"postgres"}, cfg.Applications[0].SharedWorkloads)
}

// Every problem of a placement names the file, the line and the field,
// and leaves the other files loaded.
func TestPlacementErrors(t *testing.T) {
	tests := []struct {
		name  string
		block string
		want  string
	}{
		{"both", "  cluster: east\n  selector: {matchLabels: {region: eu}}\n", "apps/x.yaml:27: placement: set either cluster or selector, not both"},
		{"neither", "  strategy: Spread\n", "apps/x.yaml:27: placement: set exactly one of cluster (a WorkloadCluster's name) and selector"},
		{"empty", "  {}\n", "apps/x.yaml:27: placement: set exactly one of cluster"},
		{"unknown strategy", "  selector: {matchLabels: {region: eu}}\n  strategy: RoundRobin\n", `apps/x.yaml:28: placement.strategy: unknown strategy "RoundRobin": use LeastLoaded or Spread`},
		{"strategy without selector", "  cluster: east\n  strategy: Spread\n", "apps/x.yaml:28: placement.strategy: a strategy chooses among the clusters a selector matches"},
		{"bad cluster name", "  cluster: East_1\n", `apps/x.yaml:27: placement.cluster: "East_1" is not a WorkloadCluster name`},
		{"bad quantity", "  cluster: east\n  requests: {cpu: lots}\n", `apps/x.yaml:28: placement.requests.cpu: "lots" is not a quantity such as 500m, 2 or 1Gi`},
		{"quantity too costly to parse", "  cluster: east\n  requests: {cpu: 1e-9999999}\n", `apps/x.yaml:28: placement.requests.cpu: "1e-9999999" is not a quantity such as 500m, 2 or 1Gi (at most 64 characters and an exponent of two digits)`},
		{"quantity of the wrong type", "  cluster: east\n  requests:\n    memory: [1Gi]\n", "apps/x.yaml:29: placement.requests.memory: expected a quantity such as 500m, 2 or 1Gi, got a list"},
		{"negative quantity", "  cluster: east\n  requests:\n    memory: -1Gi\n", "apps/x.yaml:29: placement.requests.memory: must not be negative"},
		{"unknown request", "  cluster: east\n  requests: {gpu: 1}\n", "apps/x.yaml:28: placement.requests.gpu: unknown field"},
		{"bad label key", "  selector:\n    matchLabels: {\"bad key!\": eu}\n", `apps/x.yaml:28: placement.selector.matchLabels.bad key!: "bad key!" is not a label key`},
		{"bad label value", "  selector:\n    matchLabels: {region: \"e u\"}\n", `apps/x.yaml:28: placement.selector.matchLabels.region: "e u" is not a label value`},
		{"bad operator", "  selector:\n    matchExpressions:\n      - {key: region, operator: Near, values: [eu]}\n", `apps/x.yaml:29: placement.selector.matchExpressions[0]: "Near" is not a valid label selector operator`},
		{"In without values", "  selector:\n    matchExpressions:\n      - {key: region, operator: In}\n", "apps/x.yaml:29: placement.selector.matchExpressions[0]: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"},
		{"empty selector", "  selector: {}\n", "apps/x.yaml:27: placement.selector: empty: name the labels of the clusters"},
		{"selector of the wrong type", "  selector: region=eu\n", "apps/x.yaml:27: placement.selector: expected a mapping, got a string"},
		{"unknown field", "  clusters: [east]\n", "apps/x.yaml:27: placement.clusters: unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Load(map[string][]byte{"apps/x.yaml": []byte(withPlacement(tt.block)), "apps/ok.yaml": []byte(strings.Replace(good, "name: shop", "name: other", 1))})
			require.Len(t, cfg.Applications, 1, "the other file keeps working")
			assert.Equal(t, "other", cfg.Applications[0].Name)
			require.NotEmpty(t, cfg.Errors)
			var got []string
			for _, e := range cfg.Errors {
				got = append(got, e.Error())
			}
			assert.Contains(t, strings.Join(got, "\n"), tt.want)
			assert.Contains(t, cfg.BrokenFiles, "apps/x.yaml")
		})
	}
}
