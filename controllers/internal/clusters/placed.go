package clusters

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// PlacementIndex indexes environments by the cluster they are placed in
// (PlacementKey); those with a placement still to be decided under
// Unplaced.
const (
	PlacementIndex = "placement"
	Unplaced       = "\x00unplaced"
)

// PlacementKey is an environment's PlacementIndex value.
func PlacementKey(obj client.Object) []string {
	env := obj.(*petriv1.EphemeralEnvironment)
	switch {
	case env.Status.Cluster != "":
		return []string{env.Status.Cluster}
	case env.Spec.Placement != nil && env.Status.TargetNamespace == "" && env.DeletionTimestamp.IsZero():
		return []string{Unplaced}
	}
	return nil
}

// Load is what is placed in one cluster.
type Load struct {
	Environments int
	CPU, Memory  resource.Quantity
}

// PlacedIn counts the environments placed in the named cluster, from the
// cache, with their requests.
func PlacedIn(ctx context.Context, c client.Reader, namespace, name string) (Load, error) {
	var list petriv1.EphemeralEnvironmentList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{PlacementIndex: name}); err != nil {
		return Load{}, fmt.Errorf("list environments placed in %s: %w", name, err)
	}
	var l Load
	for i := range list.Items {
		l.Add(&list.Items[i])
	}
	return l, nil
}

// Add counts env and its requests.
func (l *Load) Add(env *petriv1.EphemeralEnvironment) {
	l.Environments++
	if p := env.Spec.Placement; p != nil && p.Requests != nil {
		if p.Requests.CPU != nil {
			l.CPU.Add(*p.Requests.CPU)
		}
		if p.Requests.Memory != nil {
			l.Memory.Add(*p.Requests.Memory)
		}
	}
}
