package controllers

import (
	"context"
	"fmt"
	"slices"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/graph"
)

// validate finds what CRD validation cannot: dependency cycles and values
// keyed by unknown components. The error names the problem; the environment
// is Stalled until its spec changes.
func (r *EphemeralEnvironmentReconciler) validate(_ context.Context, env *petriv1.EphemeralEnvironment) error {
	if err := graph.Validate(nodes(env)); err != nil {
		return err
	}
	names := map[string]bool{}
	for _, c := range env.Spec.Components {
		names[c.Name] = true
	}
	var unknown []string
	for k := range env.Spec.Values {
		if !names[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("spec.values has keys that name no component: %v", unknown)
	}
	return nil
}

func nodes(env *petriv1.EphemeralEnvironment) []graph.Node {
	out := make([]graph.Node, 0, len(env.Spec.Components))
	for _, c := range env.Spec.Components {
		out = append(out, graph.Node{Name: c.Name, DependsOn: c.DependsOn})
	}
	return out
}
