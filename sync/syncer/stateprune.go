// Pruning the lifecycle states of repositories that left the config: each
// time the leader applies a config revision (a change, or its first load),
// the PullRequestStates of every repository no application names any more
// are deleted, so they do not outlive their repository in the cluster.
//
// What the config still holds as it was is kept: the repository of an
// application whose file is broken (or whose forge sync has no
// credentials for) keeps its states, as it keeps its environments, whether
// that repository is known from the revision before or from the
// environments of the application.

package syncer

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// pruneStates deletes the states of repositories that left cfg; prev is
// the revision before (nil when there was none).
func (s *Syncer) pruneStates(ctx context.Context, cfg, prev *config.Config) error {
	keep := map[string]bool{}
	for _, r := range cfg.Repositories() {
		keep[r] = true
	}
	held := map[string]bool{}
	for _, name := range cfg.BrokenFiles {
		if name != "" {
			held[name] = true
		}
	}
	if len(held) > 0 {
		if prev != nil {
			for _, a := range prev.Applications {
				if held[a.Name] {
					keep[a.RepositoryKey()] = true
				}
			}
		}
		var envs petriv1.EphemeralEnvironmentList
		if err := s.cache.List(ctx, &envs, client.InNamespace(s.opts.Namespace)); err != nil {
			return err
		}
		for i := range envs.Items {
			e := &envs.Items[i]
			if render.Owned(e.Labels) && held[e.Labels[render.LabelApplication]] {
				keep[render.RepositoryKey(e.Annotations)] = true
			}
		}
	}
	n, err := s.store.Prune(ctx, func(repo string) bool { return keep[repo] })
	if n > 0 {
		s.log.Info("Forgot the pull-request states of repositories that left the config", "states", n)
	}
	return err
}
