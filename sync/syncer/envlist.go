package syncer

import (
	"context"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// listEnvironments lists, from the API server, the environments sync wrote
// for the applications of one repository: those whose application label
// names one of them. Listing every environment sync wrote on every
// reconcile, and decoding them all, was most of a reconcile's time at 50
// webhooks a second and grew with the number of environments (make bench,
// docs/benchmarks.md); the API server answers a label-selected list from
// its watch cache and sends only the repository's. The list stays a read
// from the API server, never from sync's own cache, so a reconcile sees
// every write, its own and others', that came before it.
func (s *Syncer) listEnvironments(ctx context.Context, apps []*config.Application, list *petriv1.EphemeralEnvironmentList) error {
	names := make([]string, 0, len(apps))
	for _, a := range apps {
		names = append(names, a.Name)
	}
	sel := labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: render.ManagedBy})
	in, err := labels.NewRequirement(render.LabelApplication, selection.In, names)
	if err != nil {
		return err
	}
	return s.client.List(ctx, list, client.InNamespace(s.opts.Namespace), client.MatchingLabelsSelector{Selector: sel.Add(*in)})
}
