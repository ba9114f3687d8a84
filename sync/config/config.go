// Package config reads Petri's declarative config repository: one YAML file
// per application (which GitHub repository, which pull requests, which
// charts with which values) and one per shared workload. Every problem is
// reported with its file, line and field, and a broken file never hides the
// other files.
package config

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// APIVersion is the only apiVersion config files may name.
const APIVersion = "petri.dev/v1alpha1"

// Kinds of config files.
const (
	KindApplication    = "Application"
	KindSharedWorkload = "SharedWorkload"
)

// Application is one file of kind Application: the pull requests of one
// repository (on GitHub, GitLab, Gitea or Forgejo) that become
// environments, and what those environments run.
type Application struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name identifies the application; environment names start with it.
	Name string `json:"name"`
	// Forge is the code host of the repository: github (the default),
	// gitlab, gitea or forgejo (forge.go).
	Forge string `json:"forge"`
	// Repository is the repository whose pull requests spawn environments:
	// owner/name, or on GitLab a project path that may sit in nested
	// groups (group/subgroup/project).
	Repository string `json:"repository"`
	// Trigger filters the pull requests.
	Trigger Trigger `json:"trigger"`
	// ArtifactGate names the CI result that must be successful on a head
	// commit before that commit is deployed.
	ArtifactGate *Gate `json:"artifactGate"`
	// Components are the environment's Helm releases.
	Components []Component `json:"components"`
	// SharedWorkloads the environment binds to.
	SharedWorkloads []string `json:"sharedWorkloads"`
	// TTL deletes an environment this long after it first became Ready for
	// the pull request's head commit (a push starts it again); sync
	// remembers the expiry in the pull request's PullRequestState, so an
	// expired environment stays gone until a push or a command brings it
	// back.
	TTL *Duration `json:"ttl"`
	// KeepLabel, on a pull request, suspends expiry; DefaultKeepLabel when
	// empty.
	KeepLabel string `json:"keepLabel"`
	// SleepAfter puts an environment to sleep (its Deployments and
	// StatefulSets scaled to zero) after this long without a push or a
	// command; nil: never.
	SleepAfter *Duration `json:"sleepAfter"`
	// Deployments makes each environment a GitHub deployment of its head
	// commit, with deployment statuses.
	Deployments bool `json:"deployments"`
	// MergeQueue says what the application's commit status says on a
	// merge group of GitHub's merge queue (mergequeue.go): success (the
	// default), environment or off.
	MergeQueue string `json:"mergeQueue"`
	// MaxEnvironments caps the environments of this application; 0 means no cap.
	MaxEnvironments int `json:"maxEnvironments"`
	// URL is a template of the address shown to reviewers.
	URL string `json:"url"`
	// Placement chooses the workload cluster of each of the application's
	// environments (their spec.placement); nil: the management cluster.
	// The operator reads it once, when it places an environment, so a
	// change reaches only environments not placed yet (placement.go).
	Placement *petriv1.Placement `json:"placement"`

	// File is the file the application was read from.
	File string `json:"-"`

	headBranch *regexp.Regexp
	baseBranch *regexp.Regexp
	lines      map[string]int
}

// Line returns the line of a field path (components[1].chart.version) in
// the application's file, so that problems found later, such as a chart
// version no repository satisfies, still point at their line.
func (a *Application) Line(field string) int {
	for p := field; ; {
		if l, ok := a.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return 1
		}
		p = p[:i]
	}
}

// Trigger selects pull requests.
type Trigger struct {
	// Labels must all be on the pull request.
	Labels []string `json:"labels"`
	// ExcludeLabels must all be absent.
	ExcludeLabels []string `json:"excludeLabels"`
	// Drafts lets draft pull requests have environments.
	Drafts bool `json:"drafts"`
	// HeadBranch and BaseBranch are regular expressions the branches must match.
	HeadBranch string `json:"headBranch"`
	BaseBranch string `json:"baseBranch"`
	// Forks says how pull requests from forks are treated (trust.go):
	// never, labelByWriter (the default: only once someone with write
	// access added every trigger label) or always. A fork's branch, title
	// and CI are its author's to choose; a label a writer added is the
	// only sign that someone trusted looked at it.
	Forks string `json:"forks"`
	// Authors, when set, lets only these authors' pull requests have
	// environments.
	Authors *Authors `json:"authors"`
}

// Authors restricts the authors of pull requests that have environments:
// one in Logins, or one whose permission on the repository is at least
// Permission. Either may be left out; at least one is set.
type Authors struct {
	Logins []string `json:"logins"`
	// Permission is read, write or admin.
	Permission string `json:"permission"`
}

// Gate is an artifact gate: exactly one of CheckRun and StatusContext is
// set.
type Gate struct {
	CheckRun      string `json:"checkRun"`
	StatusContext string `json:"statusContext"`
	// App is the slug of the GitHub App whose check run counts
	// (github-actions for workflows): a run of the same name posted by
	// another app (a fork's own workflow under another app, any app
	// installed on the repository) does not pass the gate. Without it, a
	// check run gate passes by name for pull requests from the repository
	// itself and never for one from a fork.
	App string `json:"app"`
}

// Component is one Helm release of the application.
type Component struct {
	Name  string `json:"name"`
	Chart Chart  `json:"chart"`
	// Values are static chart values, the same for every pull request.
	Values map[string]any `json:"values"`
	// PullRequestValues are values whose strings are templates over the pull
	// request; they end up in the environment's spec.values[name].
	PullRequestValues map[string]any `json:"pullRequestValues"`
	DependsOn         []string       `json:"dependsOn"`
	Uses              []string       `json:"uses"`
	Release           Release        `json:"release"`
}

// Chart references a chart; Version is exact or a semver constraint.
type Chart struct {
	Repository string `json:"repository"`
	Name       string `json:"name"`
	Version    string `json:"version"`
}

// Release tunes the Helm operation. Wait is true when unset: the deploy
// waits for the release's workloads to be ready; false opts out.
type Release struct {
	Wait    *bool     `json:"wait"`
	Timeout *Duration `json:"timeout"`
}

// SharedWorkload is one file of kind SharedWorkload, applied as a
// SharedWorkload object; its chart version may be a constraint.
type SharedWorkload struct {
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Name       string                     `json:"name"`
	Spec       petriv1.SharedWorkloadSpec `json:"spec"`

	File string `json:"-"`
}

// Duration is a Go duration written as a string (72h, 90m).
type Duration struct{ time.Duration }

// UnmarshalJSON parses "72h".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := jsonUnmarshal(b, &s); err != nil {
		return fmt.Errorf("expected a duration such as 72h")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 72h or 30m", s)
	}
	if v <= 0 {
		return fmt.Errorf("duration %q must be positive", s)
	}
	d.Duration = v
	return nil
}

// Config is one revision of the config repository.
type Config struct {
	// Revision is the commit the files were read from.
	Revision        string
	Applications    []*Application
	SharedWorkloads []*SharedWorkload
	// Errors lists every problem; the files they are in are left out.
	Errors []*Error
	// BrokenFiles maps each file with errors to the application or shared
	// workload name it declares, as far as it could be read.
	BrokenFiles map[string]string
}

// Application returns the application of that name.
func (c *Config) Application(name string) *Application {
	for _, a := range c.Applications {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Repositories lists the repositories of all applications by their keys
// (RepositoryKey).
func (c *Config) Repositories() []string {
	var out []string
	for _, a := range c.Applications {
		if k := a.RepositoryKey(); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// IsConfigFile reports whether a repository path is read as config.
func IsConfigFile(p string) bool {
	ext := path.Ext(p)
	base := path.Base(p)
	return (ext == ".yaml" || ext == ".yml") && !strings.HasPrefix(base, ".")
}

// DefaultKeepLabel is the pull request label that suspends expiry when an
// application names none.
const DefaultKeepLabel = "petri/keep"

// Keep returns the label that suspends expiry.
func (a *Application) Keep() string {
	if a.KeepLabel == "" {
		return DefaultKeepLabel
	}
	return a.KeepLabel
}

// MaxApplicationName keeps environment names (name, pull request number and
// hash) short enough for the namespace names derived from them.
const MaxApplicationName = 30
