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

import "github.com/petri-dev/petri/sync/config"

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
