// The registry: which forge serves a repository. sync routes each
// repository's calls to the roles of its application's forge.

package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Roles are one forge's three roles. A forge that plays all three (every
// provider does) fills them with itself; a test may stand in for one.
type Roles struct {
	Source   PullRequestSource
	Reporter Reporter
	Commands CommandReader
}

// RolesOf is a provider in all three of its roles.
func RolesOf(p Provider) Roles { return Roles{Source: p, Reporter: p, Commands: p} }

// Complete reports whether every role is filled.
func (r Roles) Complete() bool { return r.Source != nil && r.Reporter != nil && r.Commands != nil }

// ErrForgeNotServed says a repository is on a forge sync has no provider
// (no credentials) for.
var ErrForgeNotServed = errors.New("forge not served: sync has no credentials for it")

// Registry holds the forges sync serves, by the name applications give
// them (github, gitlab, gitea, forgejo).
type Registry map[string]Roles

// Serves reports whether a forge has a provider.
func (r Registry) Serves(forge string) bool {
	_, ok := r[forge]
	return ok
}

// Lookup returns a forge's roles. A forge without a provider gets roles
// that refuse every call with ErrForgeNotServed: nothing is listed, so
// nothing is deleted, and the refusal names the forge.
func (r Registry) Lookup(forge string) Roles {
	if roles, ok := r[forge]; ok {
		return roles
	}
	u := unserved{forge}
	return Roles{Source: u, Reporter: u, Commands: u}
}

// Forges lists the forges served, sorted.
func (r Registry) Forges() []string {
	out := make([]string, 0, len(r))
	for f := range r {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// Forgetters are a forge's roles that remember something per pull
// request; a forge playing several roles appears once per role
// (forgetting is idempotent).
func (r Registry) Forgetters(forge string) []Forgetter {
	roles, ok := r[forge]
	if !ok {
		return nil
	}
	var out []Forgetter
	for _, role := range []any{roles.Source, roles.Reporter, roles.Commands} {
		if f, ok := role.(Forgetter); ok {
			out = append(out, f)
		}
	}
	return out
}

// unserved stands in for a forge without a provider.
type unserved struct{ forge string }

func (u unserved) err() error { return fmt.Errorf("%s: %w", u.forge, ErrForgeNotServed) }

func (u unserved) ListOpenPullRequests(context.Context, string) ([]PullRequest, error) {
	return nil, u.err()
}

func (u unserved) GetPullRequest(context.Context, string, int) (PullRequest, error) {
	return PullRequest{}, u.err()
}

func (u unserved) GateState(context.Context, string, string, Gate) (GateState, string, error) {
	return "", "", u.err()
}

func (u unserved) SetCommitStatus(context.Context, string, string, CommitStatus) error {
	return u.err()
}

func (u unserved) UpsertComment(context.Context, string, int, string, string) error { return u.err() }

func (u unserved) FindDeployment(context.Context, string, string, string) (int64, error) {
	return 0, u.err()
}

func (u unserved) CreateDeployment(context.Context, string, Deployment) (int64, error) {
	return 0, u.err()
}

func (u unserved) SetDeploymentStatus(context.Context, string, int64, DeploymentStatus) error {
	return u.err()
}

func (u unserved) ListComments(context.Context, string, int) ([]Comment, error) {
	return nil, u.err()
}

func (u unserved) ListRepositoryComments(context.Context, string, time.Time) ([]Comment, error) {
	return nil, u.err()
}

func (u unserved) React(context.Context, string, int64, string) error { return u.err() }

func (u unserved) Permission(context.Context, string, string) (string, error) {
	return PermissionNone, u.err()
}
