// Forges: each repository's calls go to the provider of its application's
// forge. A repository is known by its key (config.RepositoryKey): GitHub's
// owner/name, or another forge's name and path.

package syncer

import (
	"errors"
	"fmt"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
)

// registry is the forges of the options: GitHub from Provider (or the
// roles standing in for it), the others from Forges.
func registry(opts Options) (provider.Registry, error) {
	gh := provider.Roles{Source: opts.PullRequests, Reporter: opts.Reporter, Commands: opts.Commands}
	if opts.Provider != nil {
		all := provider.RolesOf(opts.Provider)
		gh.Source, gh.Reporter, gh.Commands = or(gh.Source, all.Source), or(gh.Reporter, all.Reporter), or(gh.Commands, all.Commands)
	}
	reg := provider.Registry{}
	if gh.Source != nil || gh.Reporter != nil || gh.Commands != nil {
		if !gh.Complete() {
			return nil, errors.New("syncer: GitHub needs all three roles (Provider, or PullRequests, Reporter and Commands)")
		}
		reg[config.ForgeGitHub] = gh
	}
	for name, p := range opts.Forges {
		switch {
		case name == config.ForgeGitHub:
			return nil, errors.New("syncer: GitHub is Options.Provider, not one of Options.Forges")
		case !isKnownForge(name):
			return nil, fmt.Errorf("syncer: unknown forge %q", name)
		case p == nil:
			return nil, fmt.Errorf("syncer: forge %s has no provider", name)
		}
		reg[name] = provider.RolesOf(p)
	}
	if len(reg) == 0 {
		return nil, errors.New("syncer: no forge: Provider or Forges is required")
	}
	return reg, nil
}

func or[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

func isKnownForge(name string) bool {
	for _, f := range config.KnownForges {
		if f == name {
			return true
		}
	}
	return false
}

// forgeOf is the forge of a repository key, pathOf its path there.
func forgeOf(key string) string {
	f, _ := config.SplitRepositoryKey(key)
	return f
}

func pathOf(key string) string {
	_, p := config.SplitRepositoryKey(key)
	return p
}

// forgeSet is the roles of every forge served: what the pass lists and
// reads, what feedback reports, what commands are read from, on the forge
// of each repository.
type forgeSet struct{ reg provider.Registry }

// sourceOf and reporterOf are the roles of a repository's forge; those of
// a forge sync does not serve refuse every call.
func (f forgeSet) sourceOf(key string) provider.PullRequestSource {
	return f.reg.Lookup(forgeOf(key)).Source
}

func (f forgeSet) reporterOf(key string) provider.Reporter {
	return f.reg.Lookup(forgeOf(key)).Reporter
}

// unlearnRepository tells the roles of a repository's forge that remember
// things of it to forget them.
func (f forgeSet) unlearnRepository(key string) {
	forge, path := config.SplitRepositoryKey(key)
	for _, fg := range f.reg.Forgetters(forge) {
		fg.ForgetRepository(path)
	}
}

// unlearnPullRequest tells the roles of a repository's forge that remember
// things of its pull requests to forget one.
func (f forgeSet) unlearnPullRequest(key string, number int) {
	forge, path := config.SplitRepositoryKey(key)
	for _, fg := range f.reg.Forgetters(forge) {
		fg.ForgetPullRequest(path, number)
	}
}

// repoForge is one repository's path on its forge and the roles a pass
// over it calls, looked up once for the pass.
type repoForge struct {
	path     string
	source   provider.PullRequestSource
	commands provider.CommandReader
}

// of is the forge of a repository, by its key.
func (f forgeSet) of(key string) repoForge {
	forge, path := config.SplitRepositoryKey(key)
	roles := f.reg.Lookup(forge)
	return repoForge{path: path, source: roles.Source, commands: roles.Commands}
}

// Serves reports whether sync has a provider for a forge.
func (f forgeSet) Serves(forge string) bool { return f.reg.Serves(forge) }
