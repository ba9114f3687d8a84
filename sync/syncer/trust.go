// Trust: the facts an application's trigger needs beyond the listing, to
// tell who stands behind a pull request (config/trust.go): its author's
// permission, and who added the trigger labels of a fork's pull request.
// They are looked up only for pull requests that every other filter
// matches, and remembered: a permission for trustTTL, who added a label
// until the pull request changes (a label removed and added again by
// someone else changes its updated_at).

package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// trustTTL is how long a user's permission is taken as read: a writer
// whose access is taken away stops qualifying pull requests this long
// after at the latest.
const trustTTL = 5 * time.Minute

// trustCache is a repository's looked-up facts, guarded by repoState.mu.
type trustCache struct {
	// perms are users' permissions (by lower-case login) and when they
	// were read.
	perms map[string]readPerm
	// adders are, per pull request, who added each label it carries, as
	// read at the pull request's updated time.
	adders map[int]labelAdders
}

type labelAdders struct {
	updated time.Time
	by      map[string]string
}

type readPerm struct {
	perm string
	at   time.Time
}

// trustReader looks up who stands behind pull requests, on their forge,
// and remembers it in their repository's state.
type trustReader struct {
	clock clock.Clock
}

// readTrust fills in the Trust of each open pull request that an
// application would match if everything about it were trusted. A fact
// that cannot be read leaves the pull request unknown for the pass
// (nothing written or deleted for it); a rate limit stops the pass.
func (tr *trustReader) readTrust(ctx context.Context, o *observation) error {
	tr.pruneTrust(o)
	var rle *provider.RateLimitError
	for i, pr := range o.open {
		best := fullyTrusted(pr)
		asIs, atBest := render.View(pr), render.View(best)
		authorPerm, labels := false, false
		for _, app := range o.apps {
			if app.Matches(asIs).Match || !app.Matches(atBest).Match {
				continue
			}
			authorPerm = authorPerm || app.NeedsAuthorPermission(pr.Author)
			if app.NeedsLabelAdders(pr.Fork) {
				labels = true
			}
		}
		if !authorPerm && !labels {
			continue
		}
		t, err := tr.trustOf(ctx, o.rs, o.forge, pr, authorPerm, labels)
		if err != nil {
			if errors.As(err, &rle) {
				return err
			}
			o.unknown[pr.Number] = true
			o.errs = append(o.errs, fmt.Errorf("who stands behind pull request %s#%d: %w", o.repo, pr.Number, err))
			continue
		}
		pr.Trust = t
		o.open[i] = pr
		o.openBy[pr.Number] = pr
	}
	return nil
}

// fullyTrusted is a pull request as if its author were an admin and every
// label were added by a writer: what it can match at best.
func fullyTrusted(pr provider.PullRequest) provider.PullRequest {
	pr.Trust = &provider.Trust{AuthorPermission: provider.PermissionAdmin, WriterLabels: pr.Labels}
	return pr
}

// trustOf looks up the author's permission and, with labels, which of the
// pull request's labels a writer added.
func (tr *trustReader) trustOf(ctx context.Context, rs *repoState, forge repoForge, pr provider.PullRequest, authorPerm, labels bool) (*provider.Trust, error) {
	t := &provider.Trust{}
	if authorPerm {
		p, err := tr.permission(ctx, rs, forge, pr.Author)
		if err != nil {
			return nil, err
		}
		t.AuthorPermission = p
	}
	if !labels {
		return t, nil
	}
	adders, err := tr.labelAdders(ctx, rs, forge, pr)
	if err != nil {
		return nil, err
	}
	for _, l := range pr.Labels {
		if adders[l] == "" {
			continue
		}
		p, err := tr.permission(ctx, rs, forge, adders[l])
		if err != nil {
			return nil, err
		}
		if isWriter(p) {
			t.WriterLabels = append(t.WriterLabels, l)
		}
	}
	return t, nil
}

func isWriter(perm string) bool {
	return perm == provider.PermissionAdmin || perm == provider.PermissionWrite
}

// permission is a user's permission on the repository, read at most once
// per trustTTL. A user the forge does not know has none.
func (tr *trustReader) permission(ctx context.Context, rs *repoState, forge repoForge, user string) (string, error) {
	key, now := strings.ToLower(user), tr.clock.Now()
	rs.mu.Lock()
	c, ok := rs.trust.perms[key]
	rs.mu.Unlock()
	if ok && now.Sub(c.at) < trustTTL {
		return c.perm, nil
	}
	perm, err := forge.commands.Permission(ctx, forge.path, user)
	if errors.Is(err, provider.ErrNotFound) {
		perm, err = provider.PermissionNone, nil
	}
	if err != nil {
		return "", fmt.Errorf("permission of %s: %w", user, err)
	}
	rs.mu.Lock()
	if rs.trust.perms == nil {
		rs.trust.perms = map[string]readPerm{}
	}
	rs.trust.perms[key] = readPerm{perm, now}
	rs.mu.Unlock()
	return perm, nil
}

// labelAdders is who last added each label of the pull request, read
// once per change of the pull request; none when the forge cannot say
// (provider.LabelHistory).
func (tr *trustReader) labelAdders(ctx context.Context, rs *repoState, forge repoForge, pr provider.PullRequest) (map[string]string, error) {
	rs.mu.Lock()
	c, ok := rs.trust.adders[pr.Number]
	rs.mu.Unlock()
	if ok && c.updated.Equal(pr.UpdatedAt) {
		return c.by, nil
	}
	h, isHistory := forge.source.(provider.LabelHistory)
	if !isHistory {
		return nil, nil
	}
	by, err := h.LabelAdders(ctx, forge.path, pr.Number)
	if err != nil {
		return nil, fmt.Errorf("who added the labels: %w", err)
	}
	rs.mu.Lock()
	if rs.trust.adders == nil {
		rs.trust.adders = map[int]labelAdders{}
	}
	rs.trust.adders[pr.Number] = labelAdders{updated: pr.UpdatedAt, by: by}
	rs.mu.Unlock()
	return by, nil
}

// pruneTrust forgets permissions past trustTTL, and who added the labels
// of a pull request that changed or is no longer open.
func (tr *trustReader) pruneTrust(o *observation) {
	now := tr.clock.Now()
	o.rs.mu.Lock()
	defer o.rs.mu.Unlock()
	for k, c := range o.rs.trust.perms {
		if now.Sub(c.at) >= trustTTL {
			delete(o.rs.trust.perms, k)
		}
	}
	for n, c := range o.rs.trust.adders {
		if pr, open := o.openBy[n]; !open || !c.updated.Equal(pr.UpdatedAt) {
			delete(o.rs.trust.adders, n)
		}
	}
}
