// Placement: which workload cluster an application's environments run in,
// checked when the file is loaded so that the operator is never handed a
// placement the API server would refuse or could not act on.

package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// PlacementStrategies are the strategies a selector may name, in the order
// they are documented; the first is the default.
var PlacementStrategies = []petriv1.PlacementStrategy{petriv1.PlacementLeastLoaded, petriv1.PlacementSpread}

// maxClusterName is a WorkloadCluster name's limit in spec.placement.cluster.
const maxClusterName = 63

func validatePlacement(d *decoder, p *petriv1.Placement) {
	if p == nil {
		return
	}
	hasSelector := p.Selector != nil
	switch {
	case p.Cluster != "" && hasSelector:
		d.errorf("placement", "set either cluster or selector, not both")
	case p.Cluster == "" && !hasSelector:
		d.errorf("placement", "set exactly one of cluster (a WorkloadCluster's name) and selector (labels of WorkloadClusters)")
	case p.Cluster != "":
		if len(p.Cluster) > maxClusterName || !dnsLabel.MatchString(p.Cluster) {
			d.errorf("placement.cluster", "%q is not a WorkloadCluster name: lower-case letters, digits and '-', at most %d characters", p.Cluster, maxClusterName)
		}
		if p.Strategy != "" {
			d.errorf("placement.strategy", "a strategy chooses among the clusters a selector matches; with cluster there is nothing to choose")
		}
	default:
		validateSelector(d, "placement.selector", p.Selector)
	}
	if s := p.Strategy; s != "" && !slices.Contains(PlacementStrategies, s) {
		d.errorf("placement.strategy", "unknown strategy %q: use %s", s, strategyList())
	}
	if r := p.Requests; r != nil {
		for _, q := range []struct {
			field string
			q     *resource.Quantity
		}{{"cpu", r.CPU}, {"memory", r.Memory}} {
			if q.q != nil && q.q.Sign() < 0 {
				d.errorf("placement.requests."+q.field, "must not be negative")
			}
		}
	}
}

// validateSelector checks a label selector as the API server's label
// parser does, each label and expression at its own line.
func validateSelector(d *decoder, path string, s *metav1.LabelSelector) {
	if len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0 {
		d.errorf(path, "empty: name the labels of the clusters in matchLabels or matchExpressions")
		return
	}
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		p := path + ".matchLabels." + k
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			d.errorf(p, "%q is not a label key: %s", k, strings.Join(errs, "; "))
		}
		if v := s.MatchLabels[k]; len(validation.IsValidLabelValue(v)) > 0 {
			d.errorf(p, "%q is not a label value: %s", v, strings.Join(validation.IsValidLabelValue(v), "; "))
		}
	}
	for i, e := range s.MatchExpressions {
		one := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{e}}
		if _, err := metav1.LabelSelectorAsSelector(one); err != nil {
			d.errorf(fmt.Sprintf("%s.matchExpressions[%d]", path, i), "%v (operators: In, NotIn, Exists, DoesNotExist)", err)
		}
	}
}

func strategyList() string {
	names := make([]string, len(PlacementStrategies))
	for i, s := range PlacementStrategies {
		names[i] = string(s)
	}
	return strings.Join(names, " or ")
}
