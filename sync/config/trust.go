// Trust: who may have an environment. A pull request from a fork is its
// author's in every part (branch, title, commits, the CI its workflows
// report), so an application says how forks are treated, may restrict
// authors, and pins its check run gate to the app that posts the run.

package config

import (
	"fmt"
	"slices"
	"strings"
)

// Values of trigger.forks.
const (
	// ForksNever gives pull requests from forks no environment.
	ForksNever = "never"
	// ForksLabelByWriter gives a pull request from a fork an environment
	// only once every trigger label on it was added by someone with write
	// access to the repository. The default.
	ForksLabelByWriter = "labelByWriter"
	// ForksAlways treats pull requests from forks as any other.
	ForksAlways = "always"
)

// ForksModes are the values of trigger.forks, in the order they are
// documented.
var ForksModes = []string{ForksNever, ForksLabelByWriter, ForksAlways}

// AuthorPermissions are the values of trigger.authors.permission, weakest
// first.
var AuthorPermissions = []string{"read", "write", "admin"}

// ForksMode is the application's trigger.forks, ForksLabelByWriter when
// it names none.
func (a *Application) ForksMode() string {
	if a.Trigger.Forks == "" {
		return ForksLabelByWriter
	}
	return a.Trigger.Forks
}

// NeedsAuthorPermission reports whether matching a pull request needs its
// author's permission on the repository: only when trigger.authors names
// a permission and the author is not one of its logins.
func (a *Application) NeedsAuthorPermission(author string) bool {
	au := a.Trigger.Authors
	return au != nil && au.Permission != "" && !au.listed(author)
}

// NeedsLabelAdders reports whether matching a pull request needs to know
// who added its trigger labels: a fork's, under labelByWriter.
func (a *Application) NeedsLabelAdders(fork bool) bool {
	return fork && a.ForksMode() == ForksLabelByWriter && len(a.Trigger.Labels) > 0
}

func (au *Authors) listed(login string) bool {
	return slices.ContainsFunc(au.Logins, func(l string) bool { return strings.EqualFold(l, login) })
}

// atLeast reports whether permission perm reaches min (AuthorPermissions);
// an unknown or empty perm reaches nothing.
func atLeast(perm, min string) bool {
	p, m := slices.Index(AuthorPermissions, perm), slices.Index(AuthorPermissions, min)
	return p >= 0 && m >= 0 && p >= m
}

// trusted applies forks and authors to a pull request that passed the
// other filters. A fact the view lacks (Trust nil) counts as not trusted:
// the caller looks facts up only where they are needed (NeedsAuthorPermission,
// NeedsLabelAdders) and gives them to the view.
func (a *Application) trusted(pr PullRequestView) MatchResult {
	if au := a.Trigger.Authors; au != nil && !au.listed(pr.Author) {
		if au.Permission == "" || pr.Trust == nil || !atLeast(pr.Trust.AuthorPermission, au.Permission) {
			return MatchResult{Reason: fmt.Sprintf("author %s is not one of trigger.authors", pr.Author)}
		}
	}
	if !pr.Fork {
		return MatchResult{Match: true}
	}
	switch a.ForksMode() {
	case ForksNever:
		return MatchResult{Reason: "pull requests from forks have no environment (trigger.forks: never)"}
	case ForksLabelByWriter:
		if len(a.Trigger.Labels) == 0 {
			return MatchResult{Reason: "a pull request from a fork needs a trigger label added by someone with write access, and trigger.labels names none"}
		}
		for _, l := range a.Trigger.Labels {
			if pr.Trust == nil || !slices.Contains(pr.Trust.WriterLabels, l) {
				return MatchResult{Reason: fmt.Sprintf("label %q was not added by someone with write access (pull request from a fork)", l)}
			}
		}
	}
	return MatchResult{Match: true}
}

// Trust is what sync looked up of who asked for a pull request's
// environment; the forge's listing says none of it.
type Trust struct {
	// AuthorPermission is the author's permission on the repository
	// (admin, write, read or none); empty when not looked up.
	AuthorPermission string
	// WriterLabels are the labels on the pull request that someone with
	// write access added last.
	WriterLabels []string
}

// validateTrust checks trigger.forks, trigger.authors and
// artifactGate.app.
func validateTrust(d *decoder, a *Application) {
	if f := a.Trigger.Forks; f != "" && !slices.Contains(ForksModes, f) {
		d.errorf("trigger.forks", "unknown value %q: forks must be one of %s", f, strings.Join(ForksModes, ", "))
	}
	if au := a.Trigger.Authors; au != nil {
		if len(au.Logins) == 0 && au.Permission == "" {
			d.errorf("trigger.authors", "name logins, a permission, or both")
		}
		if p := au.Permission; p != "" && !slices.Contains(AuthorPermissions, p) {
			d.errorf("trigger.authors.permission", "unknown value %q: permission must be one of %s", p, strings.Join(AuthorPermissions, ", "))
		}
		for i, l := range au.Logins {
			if l == "" || strings.ContainsAny(l, " \t/") {
				d.errorf(fmt.Sprintf("trigger.authors.logins[%d]", i), "%q is not a login", l)
			}
		}
	}
	if g := a.ArtifactGate; g != nil && g.App != "" {
		switch {
		case g.CheckRun == "":
			d.errorf("artifactGate.app", "app names the app that posts a check run: set it with checkRun")
		case a.ForgeName() != ForgeGitHub:
			d.errorf("artifactGate.app", "%s check runs have no app: app is for GitHub", a.ForgeName())
		}
	}
}
