// Lifecycle: what a pass does with each pull request's lifecycle state
// once its commands are handled and before its plan is decided. A push
// counts as activity, the first Ready of a head commit starts its ttl, and
// an environment whose time is up expires; an expiry is written to the
// state store before the environment is deleted, so no restart can bring an
// expired environment back (a push or a command can).

package syncer

import (
	"context"
	"errors"
	"fmt"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// lifecycle moves each pull request's state on to now, stores the
// expiries it decided, and returns per application the pull requests whose
// environment must not exist (it expired, as the store says) and why.
func (rc *repoController) lifecycle(ctx context.Context, o *observation) (map[string]map[int]string, error) {
	now := rc.clock.Now()
	var persist []int
	lives := map[int]*prLife{}
	o.rs.mu.Lock()
	for _, n := range o.interest {
		if l := o.rs.life[n]; l != nil {
			lives[n] = l
		}
	}
	o.rs.mu.Unlock()
	for _, n := range o.interest {
		l := lives[n]
		if l == nil {
			continue
		}
		l.mu.Lock()
		next, store, expired := advance(l.state, l.saved, o.apps, o.openBy[n], o.envsOf(n), now)
		l.state = next
		l.mu.Unlock()
		if store {
			persist = append(persist, n)
		}
		for _, app := range expired {
			rc.metrics.Lifecycle.WithLabelValues("expired").Inc()
			rc.log.Info("Environment expired; recording it in the pull request's comment before deleting it",
				"repository", o.repo, "pullRequest", n, "application", app, "sha", o.openBy[n].HeadSHA)
		}
	}
	var rle *provider.RateLimitError
	for _, n := range persist {
		if err := rc.persist(ctx, prKey{o.repo, n}); err != nil {
			if errors.As(err, &rle) {
				return nil, err
			}
			o.errs = append(o.errs, fmt.Errorf("record the expiry of %s#%d: %w", o.repo, n, err))
		}
	}
	held := map[string]map[int]string{}
	for n, l := range lives {
		l.mu.Lock()
		heldBack(held, l.saved, o.apps, n, o.openBy[n].HeadSHA)
		l.mu.Unlock()
	}
	return held, nil
}

// advance moves one open pull request's state on to now: a push (or the
// first sight of the pull request) is activity and brings an expired
// environment back; the first Ready of the head commit starts each ttl; a
// ttl that is up expires the environment. It returns the new state,
// whether it must be stored before the plan (an expiry the store does not
// have), and the applications that expired now.
func advance(st, saved render.State, apps []*config.Application, pr provider.PullRequest, envs map[string]*petriv1.EphemeralEnvironment, now time.Time) (render.State, bool, []string) {
	st = st.Clone()
	persist := false
	var expired []string
	if st.ActiveSHA != pr.HeadSHA {
		// sleepAfter starts again.
		st.ActiveSHA, st.ActiveAt = pr.HeadSHA, now
	}
	for _, app := range apps {
		a := st.Apps[app.Name]
		if a != nil && a.ExpiredSHA != "" && a.ExpiredSHA != pr.HeadSHA {
			// A new head commit brings an expired environment back.
			a.Revive()
		}
		e := envs[app.Name]
		if app.TTL == nil || e == nil || e.DeletionTimestamp != nil || !app.Matches(render.View(pr)).Match {
			continue
		}
		observeReady(&st, app.Name, e, pr.HeadSHA, now)
		a = st.Apps[app.Name]
		if a != nil && a.ExpiredSHA == pr.HeadSHA {
			if sa := saved.Apps[app.Name]; sa == nil || sa.ExpiredSHA != pr.HeadSHA {
				// Decided before, not stored yet: again.
				persist = true
			}
			continue
		}
		if a == nil || keptBy(app, pr.Labels, st) != "" {
			continue
		}
		if exp := a.ExpiresAt(app.TTL.Duration, pr.HeadSHA); !exp.IsZero() && !now.Before(exp) {
			a.ExpiredSHA, a.ExpiredAt = pr.HeadSHA, now
			persist = true
			expired = append(expired, app.Name)
		}
	}
	return st, persist, expired
}

// heldBack adds to held the applications whose environment of pull
// request n expired at its head commit, as the stored state says.
func heldBack(held map[string]map[int]string, saved render.State, apps []*config.Application, n int, head string) {
	for _, app := range apps {
		a := saved.Apps[app.Name]
		if a == nil || a.ExpiredSHA == "" || a.ExpiredSHA != head || app.TTL == nil {
			continue
		}
		if held[app.Name] == nil {
			held[app.Name] = map[int]string{}
		}
		held[app.Name][n] = fmt.Sprintf("expired %s after commit %s was deployed", render.FormatDuration(app.TTL.Duration), shortSHA(a.ExpiredSHA))
	}
}

// persist stores a pull request's state now, with its comment.
func (rc *repoController) persist(ctx context.Context, key prKey) error {
	unlock := rc.lives.lockPR(key)
	defer unlock()
	return rc.feedbackLocked(ctx, key)
}

// observeReady starts an application's ttl at the first Ready (or Sleeping:
// it was deployed) of the head commit.
func observeReady(st *render.State, app string, e *petriv1.EphemeralEnvironment, head string, now time.Time) {
	if e == nil || e.Spec.Source == nil || e.Spec.Source.SHA != head || head == "" {
		return
	}
	if a := st.Apps[app]; a != nil && a.ReadySHA == head {
		return
	}
	// The time sync sees it, not the Ready condition's transition: Ready
	// may stay True across the deploy of a new commit, and its old
	// transition time would expire the new commit at once. sync sees it
	// within moments (a watch); a state lost with its comment starts the
	// clock late, never early.
	if phase, _ := render.EnvState(e); phase != "Ready" && phase != render.PhaseSleeping {
		return
	}
	a := st.App(app)
	a.ReadySHA, a.ReadyAt = head, now.UTC().Truncate(time.Second)
}

func shortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
