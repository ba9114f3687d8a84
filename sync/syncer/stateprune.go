// Pruning the lifecycle states of repositories that left the config: each
// time the leader applies a config revision (a change, or its first load),
// the PullRequestStates of every repository no application names any more
// are deleted, so they do not outlive their repository in the cluster.
//
// What the config still holds as it was is kept: the repository of an
// application whose file is broken (or whose forge sync has no
// credentials for) keeps its states, as it keeps its environments, whether
// that repository is known from the revision before, from the revision in
// which the file was last whole, or from the environments of the
// application. A file too broken to name its application (not YAML, or
// empty) stands for the application it held when it was last whole; when
// this process never saw it whole (it is new, or the process started with
// it broken), no repository can be known to have left, and nothing is
// pruned until a revision says which.

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
	s.mu.Lock()
	fileRepos := s.fileRepos
	s.mu.Unlock()
	held := map[string]bool{}
	for file, name := range cfg.BrokenFiles {
		repo, known := fileRepos[file]
		if name == "" && !known {
			s.log.Info("A broken config file names nothing; keeping every pull-request state until it does", "file", file)
			return nil
		}
		if name != "" {
			held[name] = true
		}
		if repo != "" {
			keep[repo] = true
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

// fileRepositories carries the repository of each config file's
// application from one revision to the next: a whole file says it, a
// broken one keeps what it said when it was last whole, and a file that is
// gone is forgotten. The map is made anew, never changed.
func fileRepositories(before map[string]string, cfg *config.Config) map[string]string {
	out := map[string]string{}
	for f := range cfg.BrokenFiles {
		if repo, ok := before[f]; ok {
			out[f] = repo
		}
	}
	for _, a := range cfg.Applications {
		out[a.File] = a.RepositoryKey()
	}
	for _, sw := range cfg.SharedWorkloads {
		out[sw.File] = ""
	}
	return out
}
