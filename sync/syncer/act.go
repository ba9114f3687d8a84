// Act: the last part of a repository's pass. It carries out the plan
// (deletes first, then writes, then what the feedback says of each pull
// request), puts idle environments to sleep, schedules the next look, and
// forgets what belongs to no open pull request any more. The pull requests
// it touched get their feedback.

package syncer

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/petri-dev/petri/sync/render"
)

// carryOut carries out a plan.
func (rc *repoController) carryOut(ctx context.Context, o *observation, p plan) error {
	touched := map[int]bool{}
	errs := o.errs
	for _, ap := range p.apps {
		errs = append(errs, rc.actApp(ctx, o, ap, touched)...)
	}
	now := rc.clock.Now()
	for _, sl := range p.sleep {
		if err := rc.writer.annotate(ctx, sl.env, render.AnnotationSleepRequested, now.UTC().Format(time.RFC3339)); err != nil {
			errs = append(errs, err)
			continue
		}
		rc.metrics.Lifecycle.WithLabelValues("sleep_requested").Inc()
		rc.log.Info("Environment idle; asking it to sleep", "environment", sl.env.Name, "idleSince", sl.idle, "sleepAfter", sl.after)
	}
	for _, at := range p.again {
		rc.queue.AddAfter(o.repo, at.Sub(now)+10*time.Millisecond)
	}
	for n, at := range p.warn {
		rc.feedback.AddAfter(prKey{o.repo, n}, at.Sub(now)+10*time.Millisecond)
	}
	rc.forgetClosed(o, touched)
	for n := range touched {
		rc.feedback.Add(prKey{o.repo, n})
	}
	return errors.Join(errs...)
}

// actApp carries out one application's plan: its deletes, its writes, and
// the feedback state of the pull requests it waits for or holds back.
func (rc *repoController) actApp(ctx context.Context, o *observation, ap appPlan, touched map[int]bool) []error {
	app, envs := ap.app, o.envs[ap.app.Name]
	var errs []error
	count := 0
	for _, e := range envs {
		if e.DeletionTimestamp == nil {
			count++
		}
	}
	for _, d := range ap.Delete {
		deleted := d.Reason
		if _, expired := ap.held[d.Number]; expired {
			// The comment says it expired, from the state.
			deleted = ""
		}
		// Said before the delete: the feedback its watch event starts
		// gives the reason. (While the environment exists, the feedback
		// shows it instead.)
		o.rs.setPRState(d.Number, app.Name, func(st *render.PRState) {
			st.Deleted, st.Waiting, st.Error, st.Env = deleted, "", "", nil
		})
		touched[d.Number] = true
		if err := rc.writer.deleteEnv(ctx, envs[d.Number], d.Reason); err != nil {
			errs = append(errs, err)
			continue
		}
		count--
	}
	for _, pr := range ap.Apply {
		created, err := rc.writer.writeEnv(ctx, o.rs, o.forge, app, pr, envs[pr.Number], o.since)
		if err != nil {
			errs = append(errs, err)
		}
		if created {
			count++
		}
		touched[pr.Number] = true
	}
	for n, reason := range ap.Waiting {
		head := o.openBy[n].HeadSHA
		o.rs.setPRState(n, app.Name, func(st *render.PRState) {
			st.HeadSHA, st.Waiting, st.Error, st.Deleted = head, reason, "", ""
		})
		touched[n] = true
	}
	for n := range ap.Held {
		head := o.openBy[n].HeadSHA
		o.rs.setPRState(n, app.Name, func(st *render.PRState) {
			st.HeadSHA, st.Waiting, st.Error, st.Deleted, st.Env = head, "", "", "", nil
		})
		touched[n] = true
	}
	o.rs.settle(app.Name, o, touched)
	kept := make([]string, 0, len(ap.Unknown))
	for _, u := range ap.Unknown {
		kept = append(kept, u.Name)
	}
	rc.memory.setAppStatus(app, kept, errors.Join(errs...))
	rc.metrics.Environments.WithLabelValues(app.Name).Set(float64(count))
	return errs
}

// settle brings the feedback state of an application's other pull
// requests in line: the labels of every open one it matches (the keep
// label among them), and no waiting note on one that stopped matching and
// never had an environment.
func (rs *repoState) settle(app string, o *observation, touched map[int]bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for n, per := range rs.prs {
		st := per[app]
		if st == nil {
			continue
		}
		pr, isOpen := o.openBy[n]
		if isOpen && !slices.Equal(st.Labels, pr.Labels) {
			st.Labels = slices.Clone(pr.Labels)
			touched[n] = true
		}
	}
	for n, per := range rs.prs {
		st := per[app]
		if st == nil || touched[n] {
			continue
		}
		if _, isOpen := o.openBy[n]; !isOpen || o.envs[app][n] == nil {
			if st.Waiting != "" || st.Error != "" {
				st.Waiting, st.Error = "", ""
				touched[n] = true
			}
		}
	}
}

// forgetClosed marks the pull requests that are not open any more, to be
// forgotten after their last feedback, and forgets now the gates and
// statuses of commits that are no open pull request's head.
func (rc *repoController) forgetClosed(o *observation, touched map[int]bool) {
	heads := map[string]bool{}
	for _, pr := range o.openBy {
		heads[pr.HeadSHA] = true
	}
	o.rs.mu.Lock()
	defer o.rs.mu.Unlock()
	for n := range o.rs.prs {
		if _, isOpen := o.openBy[n]; isOpen {
			delete(o.rs.closed, n)
		} else {
			o.rs.closed[n] = true
			touched[n] = true
		}
	}
	o.rs.forgetCommits(heads)
}
