// Decide: the pure part of a repository's pass. From what the pass observed
// and the lifecycle states it moved on, render.Decide plans each
// application (apply, wait, delete, keep as unknown) and the idle
// environments to put to sleep are chosen, with the times at which the pass
// must look again.

package syncer

import (
	"slices"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// plan is what a pass does for a repository.
type plan struct {
	apps []appPlan
	// sleep are idle environments asked to sleep, with the activity they
	// were idle since.
	sleep []sleepOrder
	// again are times at which the repository is reconciled again (an
	// expiry, a sleep due); warn the times at which a pull request's
	// feedback is posted again (an expiry's warning).
	again []time.Time
	warn  map[int]time.Time
}

// appPlan is render.Decide's plan of one application, with the pull
// requests held back (expired) and the environments it deletes for that.
type appPlan struct {
	app *config.Application
	render.Plan
	held map[int]string
}

type sleepOrder struct {
	env   *petriv1.EphemeralEnvironment
	after time.Duration
	idle  time.Time
}

// decide plans a pass. A pull request whose state is unknown is left out:
// nothing is written or deleted for it. lives are the pull requests'
// current lifecycle states.
func decide(o *observation, held map[string]map[int]string, lives map[int]render.State, now time.Time) plan {
	planned := make([]provider.PullRequest, 0, len(o.open))
	for _, pr := range o.open {
		if !o.unknown[pr.Number] {
			planned = append(planned, pr)
		}
	}
	p := plan{warn: map[int]time.Time{}}
	for _, app := range o.apps {
		var ex []render.Existing
		for n, e := range o.envs[app.Name] {
			ex = append(ex, render.Existing{Name: e.Name, Number: n, Deleting: e.DeletionTimestamp != nil})
		}
		p.apps = append(p.apps, appPlan{app: app, Plan: render.Decide(app, planned, o.closed, ex, held[app.Name]), held: held[app.Name]})
		p.idle(o, app, held[app.Name], lives, now)
	}
	return p
}

// idle chooses an application's environments that have been idle for its
// sleepAfter, and when to look again at the expiry, warning and sleep that
// are due later, so that none of them waits for the resync.
func (p *plan) idle(o *observation, app *config.Application, held map[int]string, lives map[int]render.State, now time.Time) {
	if app.SleepAfter != nil {
		// An environment written in this pass is not in o.envs yet: it is
		// looked at again when it may have been idle long enough.
		for n, pr := range o.openBy {
			if st, ok := lives[n]; ok && o.envs[app.Name][n] == nil && app.Matches(render.View(pr)).Match && !st.ActiveAt.IsZero() {
				if due := st.ActiveAt.Add(app.SleepAfter.Duration); due.After(now) {
					p.again = append(p.again, due)
				}
			}
		}
	}
	for n, e := range o.envs[app.Name] {
		pr, open := o.openBy[n]
		st, known := lives[n]
		if !open || !known || e.DeletionTimestamp != nil || o.unknown[n] || held[n] != "" || !app.Matches(render.View(pr)).Match {
			continue
		}
		if app.TTL != nil && keptBy(app, pr.Labels, st) == "" {
			if exp := st.Apps[app.Name].ExpiresAt(app.TTL.Duration, pr.HeadSHA); exp.After(now) {
				p.again = append(p.again, exp)
				if warn := exp.Add(-render.WarnBefore(app.TTL.Duration)); warn.After(now) && (p.warn[n].IsZero() || warn.Before(p.warn[n])) {
					p.warn[n] = warn
				}
			}
		}
		if app.SleepAfter == nil {
			continue
		}
		active := latest(st.ActiveAt, annotationTime(e, render.AnnotationWakeRequested), e.CreationTimestamp.Time)
		if asked := annotationTime(e, render.AnnotationSleepRequested); asked.After(active) {
			// Asleep, or asked to be, since the last activity (later, as
			// the operator counts it).
			continue
		}
		if due := active.Add(app.SleepAfter.Duration); now.Before(due) {
			p.again = append(p.again, due)
			continue
		}
		p.sleep = append(p.sleep, sleepOrder{env: e, after: app.SleepAfter.Duration, idle: active})
	}
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// keptBy says what suspends an application's expiry: its keep label on the
// pull request or /petri keep; empty when nothing does.
func keptBy(app *config.Application, labels []string, st render.State) string {
	switch {
	case slices.Contains(labels, app.Keep()):
		return "the label `" + app.Keep() + "`"
	case st.Kept:
		return "`/petri keep`"
	}
	return ""
}
