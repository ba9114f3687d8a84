package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
)

func wc(name string, capacity int32, labels map[string]string) *petriv1.WorkloadCluster {
	return &petriv1.WorkloadCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       petriv1.WorkloadClusterSpec{Capacity: petriv1.ClusterCapacity{Environments: capacity}},
	}
}

// The placement decision: a named cluster, or the selector's best by
// strategy among those that answer and have room; otherwise why not.
func TestChoosePlacement(t *testing.T) {
	eu := map[string]string{"region": "eu"}
	euSelector := &metav1.LabelSelector{MatchLabels: eu}
	cpu := resource.MustParse("2")
	withCPU := wc("cpu", 10, eu)
	withCPU.Spec.Capacity.CPU = &cpu
	cordoned := wc("cordoned", 10, eu)
	cordoned.Spec.Cordoned = true

	cases := []struct {
		name       string
		placement  petriv1.Placement
		requests   clusters.Load
		candidates []candidate
		want       choice
	}{
		{
			name:       "named cluster",
			placement:  petriv1.Placement{Cluster: "east"},
			candidates: []candidate{{cluster: wc("east", 2, nil), reachable: true}, {cluster: wc("west", 2, nil), reachable: true}},
			want:       choice{cluster: "east"},
		},
		{
			name:       "named cluster not registered",
			placement:  petriv1.Placement{Cluster: "north"},
			candidates: []candidate{{cluster: wc("east", 2, nil), reachable: true}},
			want:       choice{reason: petriv1.ReasonClusterNotFound, message: "no WorkloadCluster north is registered"},
		},
		{
			name:       "named cluster full",
			placement:  petriv1.Placement{Cluster: "east"},
			candidates: []candidate{{cluster: wc("east", 2, nil), reachable: true, load: clusters.Load{Environments: 2}}},
			want:       choice{reason: petriv1.ReasonClusterAtCapacity, message: "waiting for room: east (2 of 2 environments)"},
		},
		{
			name:       "named cluster does not answer",
			placement:  petriv1.Placement{Cluster: "east"},
			candidates: []candidate{{cluster: wc("east", 2, nil)}},
			want:       choice{reason: petriv1.ReasonClusterUnreachable, message: "waiting for a workload cluster to answer: east does not"},
		},
		{
			name:       "selector matches none",
			placement:  petriv1.Placement{Selector: euSelector},
			candidates: []candidate{{cluster: wc("us", 2, map[string]string{"region": "us"}), reachable: true}},
			want:       choice{reason: petriv1.ReasonClusterNotFound, message: "no WorkloadCluster matches the placement's selector"},
		},
		{
			name:      "least loaded by fraction of its cap, not by count",
			placement: petriv1.Placement{Selector: euSelector, Strategy: petriv1.PlacementLeastLoaded},
			candidates: []candidate{
				{cluster: wc("big", 100, eu), reachable: true, load: clusters.Load{Environments: 10}},
				{cluster: wc("small", 4, eu), reachable: true, load: clusters.Load{Environments: 1}},
			},
			want: choice{cluster: "big"},
		},
		{
			name:      "spread prefers fewer of the same application, then the least loaded",
			placement: petriv1.Placement{Selector: euSelector, Strategy: petriv1.PlacementSpread},
			candidates: []candidate{
				{cluster: wc("a", 100, eu), reachable: true, load: clusters.Load{Environments: 1}, sameApp: 1},
				{cluster: wc("b", 100, eu), reachable: true, load: clusters.Load{Environments: 50}, sameApp: 0},
			},
			want: choice{cluster: "b"},
		},
		{
			name:      "ties go to the first name",
			placement: petriv1.Placement{Selector: euSelector},
			candidates: []candidate{
				{cluster: wc("a", 10, eu), reachable: true},
				{cluster: wc("b", 10, eu), reachable: true},
			},
			want: choice{cluster: "a"},
		},
		{
			name:      "the cpu cap counts the requests; a cordoned cluster takes none; one not answering is skipped",
			placement: petriv1.Placement{Selector: euSelector},
			requests:  clusters.Load{CPU: resource.MustParse("1500m")},
			candidates: []candidate{
				{cluster: withCPU, reachable: true, load: clusters.Load{Environments: 1, CPU: resource.MustParse("1")}},
				{cluster: cordoned, reachable: true},
				{cluster: wc("down", 10, eu)},
				{cluster: wc("ok", 10, eu), reachable: true, load: clusters.Load{Environments: 9}},
			},
			want: choice{cluster: "ok"},
		},
		{
			name:      "a cluster not heard from since the start is waited for, not called unreachable",
			placement: petriv1.Placement{Selector: euSelector},
			candidates: []candidate{
				{cluster: wc("down", 10, eu)},
				{cluster: wc("starting", 10, eu), connecting: true},
			},
			want: choice{connecting: true},
		},
		{
			name:       "one that does not answer",
			placement:  petriv1.Placement{Selector: euSelector},
			candidates: []candidate{{cluster: wc("down", 10, eu)}},
			want:       choice{reason: petriv1.ReasonClusterUnreachable, message: "waiting for a workload cluster to answer: down does not"},
		},
		{
			name:      "all full",
			placement: petriv1.Placement{Selector: euSelector},
			requests:  clusters.Load{CPU: resource.MustParse("1500m")},
			candidates: []candidate{
				{cluster: withCPU, reachable: true, load: clusters.Load{Environments: 1, CPU: resource.MustParse("1")}},
				{cluster: cordoned, reachable: true},
			},
			want: choice{reason: petriv1.ReasonClusterAtCapacity, message: "waiting for room: cpu (cpu 1 of 2 requested), cordoned (cordoned)"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, choose(&c.placement, c.requests, c.candidates))
		})
	}
}
