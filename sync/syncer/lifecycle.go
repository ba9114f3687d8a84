// Lifecycle: what sync remembers of each pull request in the hidden marker
// of its own comment (render.State), and what it does with it before a
// repository's plan is decided: commands people wrote on the pull request,
// expiry that sticks, sleep after idle time, and the times at which it has
// to look again without waiting for the resync.
//
// The marker is the durable part: a restarted sync or a new leader reads it
// before it writes anything for a pull request, and only what the marker on
// GitHub says (saved) may hold an environment back. An expiry is written to
// the marker before the environment is deleted, so no restart can bring an
// expired environment back; a push or a command can.

package syncer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// prLife is one pull request's lifecycle state. state is the current one;
// saved is what sync's comment on GitHub carries (the last one read or
// written). Both are guarded by Syncer.mu.
type prLife struct {
	state render.State
	saved render.State
}

const (
	// commandGrace: on a pull request where sync finds no state of its own
	// (its comment is new, or was deleted), only commands younger than this
	// are acted on; older ones count as handled.
	commandGrace = 10 * time.Minute
	// commentsStep is how far the since of a repository's comment listing
	// must be able to move before it moves: between steps its URL, and so
	// its conditional request, stay the same.
	commentsStep = 10 * time.Minute
	// commentsMargin keeps the since of that listing this far behind the
	// newest comment it returned, for clocks that differ.
	commentsMargin = time.Minute
	// maxPendingCommands bounds the commands kept per pull request from
	// webhooks; beyond it the pull request's comments are listed instead.
	maxPendingCommands = 32
	// prLockStripes is the number of locks that serialise the work on one
	// pull request's comment (reconcile and feedback).
	prLockStripes = 64
)

// lockPR serialises everything that reads and then writes one pull
// request's comment; it returns the unlock.
func (s *Syncer) lockPR(key prKey) func() {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s#%d", key.Repo, key.Number)
	m := &s.prLocks[h.Sum32()%prLockStripes]
	m.Lock()
	return m.Unlock
}

// ensureLife returns a pull request's lifecycle state, reading it from
// sync's comment the first time. Commands on the pull request that the
// state does not count as handled are queued for the reconcile. The caller
// holds the pull request's lock.
func (s *Syncer) ensureLife(ctx context.Context, key prKey) (*prLife, error) {
	s.mu.Lock()
	if rs := s.repos[key.Repo]; rs != nil && rs.life[key.Number] != nil {
		l := rs.life[key.Number]
		s.mu.Unlock()
		return l, nil
	}
	s.mu.Unlock()
	cs, err := s.commands.ListComments(ctx, key.Repo, key.Number)
	if err != nil {
		return nil, fmt.Errorf("read the state in sync's comment: %w", err)
	}
	st, found := render.State{}, false
	for _, c := range cs {
		if strings.Contains(c.Body, render.CommentMarker) {
			st, found = render.ParseState(c.Body)
			break
		}
	}
	l := &prLife{state: st, saved: st.Clone()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.configured(key.Repo) {
		// Not remembered (the repository left the config), but still
		// never written over with an empty state.
		return l, nil
	}
	rs := s.repo(key.Repo)
	if have := rs.life[key.Number]; have != nil {
		return have, nil
	}
	rs.life[key.Number] = l
	for _, c := range cs {
		if c.ID <= st.LastCommand || !render.HasCommand(c.Body) || strings.Contains(c.Body, render.CommentMarker) {
			continue
		}
		if !found && time.Since(c.CreatedAt) > commandGrace {
			continue
		}
		s.addCommand(rs, c)
	}
	return l, nil
}

// lifecycleResult is what the reconcile needs from the lifecycle step.
type lifecycleResult struct {
	// held maps applications to the pull requests whose environment must
	// not exist (it expired) and why.
	held map[string]map[int]string
	// unknown are pull requests whose state could not be read: nothing is
	// written or deleted for them this round.
	unknown map[int]bool
	errs    []error
}

// lifecycle runs before a repository's plan: it reads the state of every
// open pull request that matches an application or has an environment,
// finds and acts on commands, and expires environments whose time is up.
func (s *Syncer) lifecycle(ctx context.Context, repo string, rs *repoState, apps []*config.Application, openBy map[int]provider.PullRequest, envBy map[string]map[int]*petriv1.EphemeralEnvironment) (lifecycleResult, error) {
	res := lifecycleResult{held: map[string]map[int]string{}, unknown: map[int]bool{}}
	interest := map[int]bool{}
	for n, pr := range openBy {
		for _, app := range apps {
			if envBy[app.Name][n] != nil || app.Matches(view(pr)).Match {
				interest[n] = true
			}
		}
	}
	numbers := slices.Sorted(func(yield func(int) bool) {
		for n := range interest {
			if !yield(n) {
				return
			}
		}
	})
	var rle *provider.RateLimitError
	for _, n := range numbers {
		unlock := s.lockPR(prKey{repo, n})
		_, err := s.ensureLife(ctx, prKey{repo, n})
		unlock()
		if err != nil {
			if errors.As(err, &rle) {
				return res, err
			}
			res.unknown[n] = true
			res.errs = append(res.errs, fmt.Errorf("pull request %s#%d: %w", repo, n, err))
		}
	}
	if err := s.findCommands(ctx, repo, rs, interest); err != nil {
		if errors.As(err, &rle) {
			return res, err
		}
		res.errs = append(res.errs, err)
	}

	// Commands, oldest first per pull request.
	s.mu.Lock()
	var withCommands []int
	for n := range rs.commands {
		if !interest[n] || res.unknown[n] {
			// Closed, not matching, or its state unknown: a command on it
			// waits (unknown) or is nothing to act on.
			if !interest[n] {
				delete(rs.commands, n)
			}
			continue
		}
		withCommands = append(withCommands, n)
	}
	s.mu.Unlock()
	slices.Sort(withCommands)
	for _, n := range withCommands {
		envs := map[string]*petriv1.EphemeralEnvironment{}
		for _, app := range apps {
			if e := envBy[app.Name][n]; e != nil {
				envs[app.Name] = e
			}
		}
		if err := s.handleCommands(ctx, repo, openBy[n], apps, envs); err != nil {
			if errors.As(err, &rle) {
				return res, err
			}
			res.errs = append(res.errs, err)
		}
	}

	// Pushes, readiness and expiry.
	now := time.Now()
	persist := map[int]bool{}
	s.mu.Lock()
	for _, n := range numbers {
		l := rs.life[n]
		if l == nil {
			continue
		}
		pr := openBy[n]
		if l.state.ActiveSHA != pr.HeadSHA {
			// A push (or the first sight of the pull request) counts as
			// activity: sleepAfter starts again.
			l.state.ActiveSHA, l.state.ActiveAt = pr.HeadSHA, now
		}
		for _, app := range apps {
			a := l.state.Apps[app.Name]
			if a != nil && a.ExpiredSHA != "" && a.ExpiredSHA != pr.HeadSHA {
				// A new head commit brings an expired environment back.
				a.Revive()
			}
			e := envBy[app.Name][n]
			if app.TTL == nil || e == nil || e.DeletionTimestamp != nil || !app.Matches(view(pr)).Match {
				continue
			}
			observeReady(&l.state, app.Name, e, pr.HeadSHA, now)
			a = l.state.Apps[app.Name]
			if a != nil && a.ExpiredSHA == pr.HeadSHA {
				if sa := l.saved.Apps[app.Name]; sa == nil || sa.ExpiredSHA != pr.HeadSHA {
					// Decided before, not in the comment yet: again.
					persist[n] = true
				}
				continue
			}
			if a == nil || keptBy(app, pr.Labels, l.state) != "" {
				continue
			}
			if exp := a.ExpiresAt(app.TTL.Duration, pr.HeadSHA); !exp.IsZero() && !now.Before(exp) {
				a.ExpiredSHA, a.ExpiredAt = pr.HeadSHA, now
				persist[n] = true
				s.opts.Metrics.Lifecycle.WithLabelValues("expired").Inc()
				s.log.Info("Environment expired; recording it in the pull request's comment before deleting it",
					"repository", repo, "pullRequest", n, "application", app.Name, "sha", pr.HeadSHA, "expiredAt", exp)
			}
		}
	}
	s.mu.Unlock()
	// An expiry is durable (in the comment) before it deletes anything.
	for _, n := range slices.Sorted(func(yield func(int) bool) {
		for n := range persist {
			if !yield(n) {
				return
			}
		}
	}) {
		if err := s.persist(ctx, prKey{repo, n}); err != nil {
			if errors.As(err, &rle) {
				return res, err
			}
			res.errs = append(res.errs, fmt.Errorf("record the expiry of %s#%d: %w", repo, n, err))
		}
	}

	s.mu.Lock()
	for _, n := range numbers {
		l := rs.life[n]
		if l == nil {
			continue
		}
		for _, app := range apps {
			a := l.saved.Apps[app.Name]
			if a == nil || a.ExpiredSHA == "" || a.ExpiredSHA != openBy[n].HeadSHA || app.TTL == nil {
				continue
			}
			if res.held[app.Name] == nil {
				res.held[app.Name] = map[int]string{}
			}
			res.held[app.Name][n] = fmt.Sprintf("expired %s after commit %s was deployed", render.FormatDuration(app.TTL.Duration), shortSHA(a.ExpiredSHA))
		}
	}
	s.mu.Unlock()
	return res, nil
}

// persist writes a pull request's state to its comment now.
func (s *Syncer) persist(ctx context.Context, key prKey) error {
	unlock := s.lockPR(key)
	defer unlock()
	return s.feedbackLocked(ctx, key)
}

// observeReady starts an application's ttl at the first Ready (or Sleeping:
// it was deployed) of the head commit. The caller holds s.mu.
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

// afterPlan puts idle environments to sleep and asks to look again when
// the next expiry, warning or sleep is due, so none of them waits for the
// resync.
func (s *Syncer) afterPlan(ctx context.Context, repo string, rs *repoState, apps []*config.Application, openBy map[int]provider.PullRequest, envBy map[string]map[int]*petriv1.EphemeralEnvironment, res lifecycleResult) []error {
	now := time.Now()
	var errs []error
	for _, app := range apps {
		if app.SleepAfter != nil {
			// An environment written in this round is not in envBy yet: it
			// is looked at again when it may have been idle long enough.
			s.mu.Lock()
			for n, pr := range openBy {
				if l := rs.life[n]; l != nil && envBy[app.Name][n] == nil && app.Matches(view(pr)).Match && !l.state.ActiveAt.IsZero() {
					if due := l.state.ActiveAt.Add(app.SleepAfter.Duration); due.After(now) {
						s.queue.AddAfter(repo, time.Until(due)+10*time.Millisecond)
					}
				}
			}
			s.mu.Unlock()
		}
		for n, e := range envBy[app.Name] {
			pr, open := openBy[n]
			if !open || e.DeletionTimestamp != nil || res.unknown[n] || res.held[app.Name][n] != "" || !app.Matches(view(pr)).Match {
				continue
			}
			s.mu.Lock()
			l := rs.life[n]
			var st render.State
			if l != nil {
				st = l.state.Clone()
			}
			s.mu.Unlock()
			if l == nil {
				continue
			}
			if app.TTL != nil && keptBy(app, pr.Labels, st) == "" {
				if exp := st.Apps[app.Name].ExpiresAt(app.TTL.Duration, pr.HeadSHA); exp.After(now) {
					s.queue.AddAfter(repo, time.Until(exp)+10*time.Millisecond)
					if warn := exp.Add(-render.WarnBefore(app.TTL.Duration)); warn.After(now) {
						s.feedback.AddAfter(prKey{repo, n}, time.Until(warn)+10*time.Millisecond)
					}
				}
			}
			if app.SleepAfter == nil {
				continue
			}
			active := latest(st.ActiveAt, annotationTime(e, render.AnnotationWakeRequested), e.CreationTimestamp.Time)
			if asked := annotationTime(e, render.AnnotationSleepRequested); asked.After(active) {
				// Asleep, or asked to be, since the last activity (later,
				// as the operator counts it).
				continue
			}
			due := active.Add(app.SleepAfter.Duration)
			if now.Before(due) {
				s.queue.AddAfter(repo, time.Until(due)+10*time.Millisecond)
				continue
			}
			if err := s.annotate(ctx, e, render.AnnotationSleepRequested, now.UTC().Format(time.RFC3339)); err != nil {
				errs = append(errs, err)
				continue
			}
			s.opts.Metrics.Lifecycle.WithLabelValues("sleep_requested").Inc()
			s.log.Info("Environment idle; asking it to sleep", "environment", e.Name, "idleSince", active, "sleepAfter", app.SleepAfter.Duration)
		}
	}
	return errs
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

func shortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// view is what an application's trigger looks at.
func view(pr provider.PullRequest) config.PullRequestView {
	return config.PullRequestView{Draft: pr.Draft, Labels: pr.Labels, HeadBranch: pr.HeadBranch, BaseBranch: pr.BaseBranch}
}
