// Reconcile: one repository at a time from the work queue. Open pull
// requests are listed, webhook snapshots merged in, closed ones confirmed one
// by one, and render.Decide's plan carried out per application.

package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

func (s *Syncer) processRepo(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if ctx.Err() != nil {
		// The leadership ended: what is left in the queue is not acted on.
		return true
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
	err := s.reconcileRepo(rctx, key)
	cancel()
	s.opts.Metrics.ReconcileDuration.Observe(time.Since(start).Seconds())
	var rle *provider.RateLimitError
	switch {
	case err == nil:
		s.opts.Metrics.Reconciles.WithLabelValues("success").Inc()
		s.queue.Forget(key)
	case errors.As(err, &rle):
		s.opts.Metrics.Reconciles.WithLabelValues("rate_limited").Inc()
		s.log.Info("GitHub rate limit: nothing changed, retrying after the reset", "repository", key, "until", rle.Until)
		s.queue.Forget(key)
		s.queue.AddAfter(key, time.Until(rle.Until)+time.Second)
	default:
		s.opts.Metrics.Reconciles.WithLabelValues("error").Inc()
		s.log.Error(err, "Reconciling repository failed; nothing was deleted, retrying", "repository", key)
		s.queue.AddRateLimited(key)
	}
	return true
}

func (s *Syncer) appsFor(repo string) []*config.Application {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg == nil {
		return nil
	}
	var out []*config.Application
	for _, a := range s.cfg.Applications {
		if strings.EqualFold(a.Repository, repo) {
			out = append(out, a)
		}
	}
	return out
}

func (s *Syncer) setAppError(apps []*config.Application, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range apps {
		st := s.appStatus[a.Name]
		if st == nil {
			st = &appStatus{}
			s.appStatus[a.Name] = st
		}
		st.LastReconcile = time.Now()
		st.LastError = ""
		if err != nil {
			st.LastError = err.Error()
		}
	}
}

// reconcileRepo brings the environments of every application of one
// repository to the desired state.
func (s *Syncer) reconcileRepo(ctx context.Context, repo string) error {
	apps := s.appsFor(repo)
	s.mu.Lock()
	if len(apps) == 0 {
		// Left the config: whatever was remembered of it goes.
		s.forgetRepo(repo)
		s.mu.Unlock()
		return nil
	}
	rs := s.repo(repo)
	since := rs.pendingSince
	rs.pendingSince = time.Time{}
	hints := rs.hints
	rs.hints = map[int]bool{}
	s.mu.Unlock()
	log := s.log.WithValues("repository", repo)

	listed, err := s.source.ListOpenPullRequests(ctx, repo)
	if err != nil {
		// Unknown, not "none": no environment is written or deleted.
		s.setAppError(apps, err)
		s.mu.Lock()
		if rs.pendingSince.IsZero() || (!since.IsZero() && since.Before(rs.pendingSince)) {
			rs.pendingSince = since
		}
		maps.Copy(rs.hints, hints)
		s.mu.Unlock()
		return err
	}
	open := s.mergeSnapshots(rs, listed)

	var envs petriv1.EphemeralEnvironmentList
	if err := s.listEnvironments(ctx, apps, &envs); err != nil {
		s.setAppError(apps, err)
		return fmt.Errorf("list environments: %w", err)
	}
	byApp := map[string][]*petriv1.EphemeralEnvironment{}
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) || !strings.EqualFold(e.Annotations[render.AnnotationRepository], repo) {
			continue
		}
		byApp[e.Labels[render.LabelApplication]] = append(byApp[e.Labels[render.LabelApplication]], e)
	}

	// Pull requests with an environment that the listing does not show as
	// open are read one by one: only a pull request read as closed is
	// evidence. A failed read leaves the environment alone.
	openBy := map[int]provider.PullRequest{}
	for _, pr := range open {
		openBy[pr.Number] = pr
	}
	closed := map[int]provider.PullRequest{}
	for _, list := range byApp {
		for _, e := range list {
			n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
			if _, ok := openBy[n]; ok || n == 0 {
				continue
			}
			if _, ok := closed[n]; ok {
				continue
			}
			pr, err := s.source.GetPullRequest(ctx, repo, n)
			switch {
			case err != nil:
				log.Error(err, "Pull request state unknown; keeping its environment", "pullRequest", n, "environment", e.Name)
				var rle *provider.RateLimitError
				if errors.As(err, &rle) {
					return err
				}
			case pr.Open():
				// The listing disagreed (stale or truncated): trust the
				// pull request read on its own.
				openBy[n] = pr
				open = append(open, pr)
			default:
				closed[n] = pr
			}
		}
	}

	// Pull requests named by events another replica handed over, which the
	// listing does not show as open, are read on their own: the hand-over
	// carries no payload to stand in for a listing that lags.
	var errs []error
	for n := range hints {
		if _, ok := openBy[n]; ok {
			continue
		}
		if _, ok := closed[n]; ok {
			continue
		}
		pr, err := s.source.GetPullRequest(ctx, repo, n)
		switch {
		case errors.Is(err, provider.ErrNotFound):
		case err != nil:
			// Kept for the retry of this repository.
			s.mu.Lock()
			rs.hints[n] = true
			s.mu.Unlock()
			var rle *provider.RateLimitError
			if errors.As(err, &rle) {
				return err
			}
			errs = append(errs, fmt.Errorf("read pull request %s#%d: %w", repo, n, err))
		case pr.Open():
			openBy[n] = pr
			open = append(open, pr)
		default:
			closed[n] = pr
		}
	}

	envsBy := map[string]map[int]*petriv1.EphemeralEnvironment{}
	for _, app := range apps {
		envsBy[app.Name] = map[int]*petriv1.EphemeralEnvironment{}
		for _, e := range byApp[app.Name] {
			n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
			envsBy[app.Name][n] = e
		}
	}
	// The lifecycle: each pull request's state from sync's comment,
	// commands, expiry. A pull request whose state could not be read is
	// left out of the plan: nothing is written or deleted for it.
	life, err := s.lifecycle(ctx, repo, rs, apps, openBy, envsBy)
	if err != nil {
		return err
	}
	errs = append(errs, life.errs...)
	planned := open
	if len(life.unknown) > 0 {
		planned = nil
		for _, pr := range open {
			if !life.unknown[pr.Number] {
				planned = append(planned, pr)
			}
		}
	}

	touched := map[int]bool{}
	for _, app := range apps {
		existing := byApp[app.Name]
		var ex []render.Existing
		envBy := envsBy[app.Name]
		for _, e := range existing {
			n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
			ex = append(ex, render.Existing{Name: e.Name, Number: n, Deleting: e.DeletionTimestamp != nil})
		}
		held := life.held[app.Name]
		plan := render.Decide(app, planned, closed, ex, held)
		var appErrs []error
		for _, d := range plan.Delete {
			e := envBy[d.Number]
			deleted := d.Reason
			if _, expired := held[d.Number]; expired {
				// The comment says it expired, from the state.
				deleted = ""
			}
			// Said before the delete: the feedback its watch event starts
			// gives the reason. (While the environment exists, the
			// feedback shows it instead.)
			s.setPRState(repo, d.Number, app.Name, func(st *render.PRState) {
				st.Deleted, st.Waiting, st.Error, st.Env = deleted, "", "", nil
			})
			touched[d.Number] = true
			if err := s.deleteEnv(ctx, e, d.Reason); err != nil {
				appErrs = append(appErrs, err)
				continue
			}
		}
		count := 0
		for _, e := range existing {
			if e.DeletionTimestamp == nil {
				count++
			}
		}
		count -= len(plan.Delete) - len(appErrs)
		for _, pr := range plan.Apply {
			created, err := s.writeEnv(ctx, app, pr, envBy[pr.Number], since)
			if err != nil {
				appErrs = append(appErrs, err)
			}
			if created {
				count++
			}
			touched[pr.Number] = true
		}
		for n, reason := range plan.Waiting {
			pr := openBy[n]
			s.setPRState(repo, n, app.Name, func(st *render.PRState) {
				st.HeadSHA, st.Waiting, st.Error, st.Deleted = pr.HeadSHA, reason, "", ""
			})
			touched[n] = true
		}
		for n := range plan.Held {
			pr := openBy[n]
			s.setPRState(repo, n, app.Name, func(st *render.PRState) {
				st.HeadSHA, st.Waiting, st.Error, st.Deleted, st.Env = pr.HeadSHA, "", "", "", nil
			})
			touched[n] = true
		}
		// The labels of every open pull request the application matches
		// (the keep label among them), for the feedback.
		s.mu.Lock()
		for n, per := range rs.prs {
			if st := per[app.Name]; st != nil {
				if pr, isOpen := openBy[n]; isOpen && !slices.Equal(st.Labels, pr.Labels) {
					st.Labels = slices.Clone(pr.Labels)
					touched[n] = true
				}
			}
		}
		s.mu.Unlock()
		// Pull requests that stopped matching and never had an environment
		// lose any waiting note.
		s.mu.Lock()
		for n, per := range rs.prs {
			st := per[app.Name]
			if st == nil || touched[n] {
				continue
			}
			if _, isOpen := openBy[n]; !isOpen || envBy[n] == nil {
				if st.Waiting != "" || st.Error != "" {
					st.Waiting, st.Error = "", ""
					touched[n] = true
				}
			}
		}
		s.mu.Unlock()
		kept := make([]string, 0, len(plan.Unknown))
		for _, u := range plan.Unknown {
			kept = append(kept, u.Name)
		}
		s.mu.Lock()
		st := s.appStatus[app.Name]
		if st == nil {
			st = &appStatus{}
			s.appStatus[app.Name] = st
		}
		st.Kept = kept
		s.mu.Unlock()
		s.setAppError([]*config.Application{app}, errors.Join(appErrs...))
		s.opts.Metrics.Environments.WithLabelValues(app.Name).Set(float64(count))
		errs = append(errs, appErrs...)
	}
	// Idle environments sleep; the next expiry, warning and sleep are
	// looked at when due.
	errs = append(errs, s.afterPlan(ctx, repo, rs, apps, openBy, envsBy, life)...)
	// Pull requests that are not open any more are forgotten after their
	// last feedback; the gates and statuses of commits that are no open
	// pull request's head are forgotten now.
	heads := map[string]bool{}
	for _, pr := range openBy {
		heads[pr.HeadSHA] = true
	}
	s.mu.Lock()
	for n := range rs.prs {
		if _, isOpen := openBy[n]; isOpen {
			delete(rs.closed, n)
		} else {
			rs.closed[n] = true
			touched[n] = true
		}
	}
	s.forgetCommits(repo, heads)
	s.mu.Unlock()
	for n := range touched {
		s.feedback.Add(prKey{repo, n})
	}
	return errors.Join(errs...)
}

// snapshotWindow is how long a webhook's snapshot may be ahead of GitHub's
// listing (the listing lags behind a push or a close by seconds); past it,
// the listing has caught up and is the truth. snapshotSkew allows GitHub's
// clock to be a little ahead of ours.
const (
	snapshotWindow = 10 * time.Minute
	snapshotSkew   = time.Minute
)

// snapshotFresh tells whether a snapshot dated t may still be ahead of the
// listing. One dated in the future (a forged delivery, a skewed clock) never
// is: it would otherwise override every later listing.
func snapshotFresh(t time.Time) bool {
	age := time.Since(t)
	return age < snapshotWindow && age > -snapshotSkew
}

// mergeSnapshots overlays webhook snapshots that are newer than the
// listing, while they are fresh. Snapshots the listing caught up with, and
// stale ones, are dropped.
func (s *Syncer) mergeSnapshots(rs *repoState, listed []provider.PullRequest) []provider.PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]provider.PullRequest, 0, len(listed))
	seen := map[int]bool{}
	for _, pr := range listed {
		seen[pr.Number] = true
		if snap, ok := rs.snapshots[pr.Number]; ok {
			if snap.UpdatedAt.After(pr.UpdatedAt) && snapshotFresh(snap.UpdatedAt) {
				if snap.Open() {
					out = append(out, snap)
				}
				continue
			}
			delete(rs.snapshots, pr.Number)
		}
		out = append(out, pr)
	}
	for n, snap := range rs.snapshots {
		if seen[n] {
			continue
		}
		// Not listed: an opened pull request the listing does not show yet
		// is used; a closed one is confirmed through GetPullRequest.
		if snap.Open() && snapshotFresh(snap.UpdatedAt) {
			out = append(out, snap)
		} else {
			delete(rs.snapshots, n)
		}
	}
	return out
}

func (s *Syncer) setPRState(repo string, number int, app string, change func(*render.PRState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.repo(repo)
	per := rs.prs[number]
	if per == nil {
		per = map[string]*render.PRState{}
		rs.prs[number] = per
	}
	st := per[app]
	if st == nil {
		st = &render.PRState{Application: app, Repository: repo, Number: number}
		per[app] = st
	}
	change(st)
}
