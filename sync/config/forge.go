// Forges: which code host an application's repository lives on, how its
// repository is written there, and the key sync knows a repository by.

package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Forges an application may name.
const (
	// ForgeGitHub is GitHub and GitHub Enterprise Server, the default.
	ForgeGitHub = "github"
	// ForgeGitLab is GitLab, gitlab.com or self-managed.
	ForgeGitLab = "gitlab"
	// ForgeGitea is Gitea.
	ForgeGitea = "gitea"
	// ForgeForgejo is Forgejo, which speaks Gitea's API: a forge of its own
	// (its own server, credentials and webhook secret), read by the Gitea
	// provider.
	ForgeForgejo = "forgejo"
)

// KnownForges are the forges in the order they are documented.
var KnownForges = []string{ForgeGitHub, ForgeGitLab, ForgeGitea, ForgeForgejo}

var (
	// Gitea's user, organisation and repository names: letters, digits,
	// '-', '_' and '.'.
	giteaRepoName = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$`)
	// A GitLab path segment: letters, digits, '_', '-' and '.', not
	// starting with '-' or '.'.
	gitlabSegment = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

// GitLab nests groups at most 20 deep: a project path has at most 21
// segments. MaxRepositoryPath bounds a repository path on any forge.
const (
	maxGitLabSegments = 21
	MaxRepositoryPath = 255
)

// ForgeName is the application's forge, ForgeGitHub when it names none.
func (a *Application) ForgeName() string {
	if a.Forge == "" {
		return ForgeGitHub
	}
	return a.Forge
}

// RepositoryKey is the key sync knows the application's repository by.
func (a *Application) RepositoryKey() string {
	return RepositoryKey(a.ForgeName(), a.Repository)
}

// RepositoryKey is how sync names a repository of a forge in its queues,
// its state and the annotations it reads back: the path in lower case (the
// forges name repositories case-insensitively), prefixed with the forge
// and a colon for every forge but GitHub, so that a GitHub repository's key
// is what it was before sync served other forges and acme/shop on GitHub
// and on Gitea are two repositories.
func RepositoryKey(forge, repository string) string {
	r := strings.ToLower(repository)
	if forge == "" || forge == ForgeGitHub {
		return r
	}
	return forge + ":" + r
}

// SplitRepositoryKey is the forge and the repository path of a key.
func SplitRepositoryKey(key string) (forge, repository string) {
	if f, r, ok := strings.Cut(key, ":"); ok && slices.Contains(KnownForges, f) {
		return f, r
	}
	return ForgeGitHub, key
}

// validateRepository checks the forge and the repository written on it.
func validateRepository(d *decoder, a *Application) {
	if !slices.Contains(KnownForges, a.ForgeName()) {
		d.errorf("forge", "unknown forge %q: forge must be one of %s", a.Forge, strings.Join(KnownForges, ", "))
		return
	}
	if err := checkRepository(a.ForgeName(), a.Repository); err != nil {
		d.errorf("repository", "%v", err)
	}
	switch a.ForgeName() {
	case ForgeGitea, ForgeForgejo:
		// What Gitea lacks is said at load time, not found at the first
		// pull request (docs/forges.md).
		if a.Deployments {
			d.errorf("deployments", "%s has no deployments API: the environment's URL is on the commit status and the comment", a.ForgeName())
		}
		if g := a.ArtifactGate; g != nil && g.CheckRun != "" {
			d.errorf("artifactGate.checkRun", "%s has no check runs: name the commit status context its CI reports (statusContext)", a.ForgeName())
		}
	}
}

// checkRepository tells what is wrong with a repository path on a forge.
func checkRepository(forge, repo string) error {
	if len(repo) > MaxRepositoryPath {
		return fmt.Errorf("%d characters: a repository path has at most %d", len(repo), MaxRepositoryPath)
	}
	switch forge {
	case ForgeGitHub:
		if !repoName.MatchString(repo) {
			return fmt.Errorf("%q must be a GitHub repository written owner/name", repo)
		}
	case ForgeGitea, ForgeForgejo:
		if !giteaRepoName.MatchString(repo) {
			return fmt.Errorf("%q must be a %s repository written owner/name", repo, forge)
		}
	case ForgeGitLab:
		segs := strings.Split(repo, "/")
		if len(segs) < 2 || len(segs) > maxGitLabSegments {
			return fmt.Errorf("%q must be a GitLab project path: group/project, or group/subgroup/.../project (at most %d levels)", repo, maxGitLabSegments)
		}
		for _, s := range segs {
			if !gitlabSegment.MatchString(s) || strings.HasSuffix(s, ".git") || strings.HasSuffix(s, ".atom") {
				return fmt.Errorf("%q: path segment %q must be letters, digits, '_', '-' and '.', not starting with '-' or '.'", repo, s)
			}
		}
	}
	return nil
}

// DropUnserved leaves out the applications whose forge serves returns
// false for (sync has no credentials for it): each becomes a file:line
// error at its forge field, and its file a broken one, so its environments
// are left as they are while every other application runs.
func (c *Config) DropUnserved(serves func(forge string) bool) {
	kept := c.Applications[:0]
	for _, a := range c.Applications {
		if serves(a.ForgeName()) {
			kept = append(kept, a)
			continue
		}
		field := "forge"
		if a.Forge == "" {
			field = "repository"
		}
		c.Errors = append(c.Errors, &Error{File: a.File, Line: a.Line(field), Field: field,
			Message: fmt.Sprintf("repository %s is on %s, for which sync has no credentials (see -%s-url and -%s-token-file)", a.Repository, a.ForgeName(), a.ForgeName(), a.ForgeName())})
		c.BrokenFiles[a.File] = a.Name
	}
	c.Applications = kept
}
