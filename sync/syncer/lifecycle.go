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
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	cs, err := s.opts.Provider.ListComments(ctx, key.Repo, key.Number)
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

// addCommand keeps a command comment for the reconcile, once. The caller
// holds s.mu.
func (s *Syncer) addCommand(rs *repoState, c provider.Comment) {
	for _, have := range rs.commands[c.Number] {
		if have.ID == c.ID {
			return
		}
	}
	if len(rs.commands[c.Number]) >= maxPendingCommands {
		rs.commentHints[c.Number] = true
		return
	}
	rs.commands[c.Number] = append(rs.commands[c.Number], c)
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

// findCommands lists comments to find commands whose webhook did not reach
// this replica: the pull requests another replica named (hints) and, on a
// periodic resync, the whole repository since a watermark.
func (s *Syncer) findCommands(ctx context.Context, repo string, rs *repoState, interest map[int]bool) error {
	s.mu.Lock()
	hints := rs.commentHints
	rs.commentHints = map[int]bool{}
	resync := rs.resyncDue
	rs.resyncDue = false
	since := rs.commentsSince
	if since.IsZero() {
		since = time.Now().Add(-commandGrace)
	}
	s.mu.Unlock()
	var errs []error
	for n := range hints {
		if !interest[n] {
			continue
		}
		cs, err := s.opts.Provider.ListComments(ctx, repo, n)
		if err != nil {
			s.mu.Lock()
			rs.commentHints[n] = true
			s.mu.Unlock()
			errs = append(errs, fmt.Errorf("list comments of %s#%d: %w", repo, n, err))
			continue
		}
		s.takeCommands(rs, cs, interest)
	}
	if resync {
		cs, err := s.opts.Provider.ListRepositoryComments(ctx, repo, since)
		if err != nil {
			s.mu.Lock()
			rs.resyncDue = true
			s.mu.Unlock()
			errs = append(errs, err)
		} else {
			s.takeCommands(rs, cs, interest)
			newest := since
			for _, c := range cs {
				if c.UpdatedAt.After(newest) {
					newest = c.UpdatedAt
				}
			}
			s.mu.Lock()
			rs.commentsSince = since
			if next := newest.Add(-commentsMargin); next.Sub(since) >= commentsStep {
				rs.commentsSince = next
			}
			s.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// takeCommands keeps the commands among comments that are newer than what
// their pull request's state counts as handled.
func (s *Syncer) takeCommands(rs *repoState, cs []provider.Comment, interest map[int]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		l := rs.life[c.Number]
		if !interest[c.Number] || l == nil || c.ID <= l.state.LastCommand || !render.HasCommand(c.Body) || strings.Contains(c.Body, render.CommentMarker) {
			continue
		}
		s.addCommand(rs, c)
	}
}

// handleCommands acts on a pull request's pending commands, oldest first,
// each once: the effect, then the reaction, then the state (the last
// command handled, the reply), then the comment.
func (s *Syncer) handleCommands(ctx context.Context, repo string, pr provider.PullRequest, apps []*config.Application, envs map[string]*petriv1.EphemeralEnvironment) error {
	key := prKey{repo, pr.Number}
	unlock := s.lockPR(key)
	defer unlock()
	l, err := s.ensureLife(ctx, key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	rs := s.repos[repo]
	if rs == nil {
		s.mu.Unlock()
		return nil
	}
	pending := rs.commands[pr.Number]
	delete(rs.commands, pr.Number)
	s.mu.Unlock()
	slices.SortFunc(pending, func(a, b provider.Comment) int { return cmp.Compare(a.ID, b.ID) })
	handled := false
	for i, c := range pending {
		s.mu.Lock()
		done := c.ID <= l.state.LastCommand
		s.mu.Unlock()
		if done {
			continue
		}
		if err := s.command(ctx, repo, pr, c, apps, envs, l); err != nil {
			s.mu.Lock()
			for _, p := range pending[i:] {
				s.addCommand(rs, p)
			}
			s.mu.Unlock()
			if handled {
				return errors.Join(err, s.feedbackLocked(ctx, key))
			}
			return err
		}
		handled = true
	}
	if !handled {
		return nil
	}
	return s.feedbackLocked(ctx, key)
}

// command handles one command comment.
func (s *Syncer) command(ctx context.Context, repo string, pr provider.PullRequest, c provider.Comment, apps []*config.Application, envs map[string]*petriv1.EphemeralEnvironment, l *prLife) error {
	log := s.log.WithValues("repository", repo, "pullRequest", pr.Number, "comment", c.ID, "author", c.Author)
	cmd, perr := render.ParseCommand(c.Body)
	if errors.Is(perr, render.ErrNoCommand) {
		return nil
	}
	who := "@" + c.Author
	at := c.CreatedAt
	if at.IsZero() || at.After(time.Now()) {
		at = time.Now()
	}
	text := "`" + cmd.Text + "`"
	done := func(reaction, result, note string, change func(st *render.State)) error {
		if err := s.opts.Provider.React(ctx, repo, c.ID, reaction); err != nil {
			if !errors.Is(err, provider.ErrNotFound) {
				return err
			}
			// Deleted since it was read: handled all the same.
			log.Info("Command comment deleted before its reaction", "command", cmd.Text)
		}
		s.mu.Lock()
		if change != nil {
			change(&l.state)
		}
		l.state.Note(fmt.Sprintf("%s from %s: %s", text, who, note))
		l.state.LastCommand = c.ID
		s.mu.Unlock()
		verb := cmd.Verb
		if result == "invalid" {
			verb = "unknown"
		}
		s.opts.Metrics.Commands.WithLabelValues(verb, result).Inc()
		log.Info("Pull-request command handled", "command", cmd.Text, "result", result)
		return nil
	}
	if perr != nil {
		return done(provider.ReactionRefused, "invalid", "not understood: "+perr.Error(), nil)
	}
	perm, err := s.opts.Provider.Permission(ctx, repo, c.Author)
	if err != nil {
		return fmt.Errorf("command %s on %s#%d: %w", cmd.Text, repo, pr.Number, err)
	}
	if perm != provider.PermissionAdmin && perm != provider.PermissionWrite {
		return done(provider.ReactionRefused, "refused", fmt.Sprintf("refused: %s needs write access to %s (has %s)", who, repo, perm), nil)
	}

	// The effect on each application's environment.
	s.mu.Lock()
	st := l.state.Clone()
	s.mu.Unlock()
	stamp := at.UTC().Format(time.RFC3339)
	var said []string
	var revive []string
	for _, app := range apps {
		e := envs[app.Name]
		live := e != nil && e.DeletionTimestamp == nil
		a := st.Apps[app.Name]
		expired := a != nil && a.ExpiredSHA != "" && a.ExpiredSHA == pr.HeadSHA
		if !live && !expired {
			continue
		}
		switch cmd.Verb {
		case render.CommandRedeploy:
			if expired {
				revive = append(revive, app.Name)
				said = append(said, app.Name+" comes back (it had expired)")
				continue
			}
			if err := s.annotate(ctx, e, render.AnnotationWakeRequested, stamp); err != nil {
				return err
			}
			if err := s.annotate(ctx, e, render.AnnotationRedeploy, fmt.Sprintf("comment-%d", c.ID)); err != nil {
				return err
			}
			said = append(said, app.Name+" deploys every component again")
		case render.CommandSleep:
			if expired {
				continue
			}
			if err := s.annotate(ctx, e, render.AnnotationSleepRequested, stamp); err != nil {
				return err
			}
			said = append(said, app.Name+" goes to sleep")
		case render.CommandWake:
			if expired {
				revive = append(revive, app.Name)
				said = append(said, app.Name+" comes back (it had expired)")
				continue
			}
			if err := s.annotate(ctx, e, render.AnnotationWakeRequested, stamp); err != nil {
				return err
			}
			said = append(said, app.Name+" wakes up")
		case render.CommandExtend:
			if app.TTL == nil {
				said = append(said, app.Name+" has no ttl")
				continue
			}
			if expired {
				revive = append(revive, app.Name)
			}
			aa := st.App(app.Name)
			if expired {
				aa.Revive()
			}
			aa.Extend(app.TTL.Duration, pr.HeadSHA, cmd.Duration, time.Now())
			if exp := aa.ExpiresAt(app.TTL.Duration, pr.HeadSHA); !exp.IsZero() {
				said = append(said, fmt.Sprintf("%s expires at %s", app.Name, render.FormatTime(exp)))
			} else {
				said = append(said, fmt.Sprintf("%s expires no earlier than %s", app.Name, render.FormatTime(aa.ExtendedUntil)))
			}
		case render.CommandKeep:
			if expired {
				revive = append(revive, app.Name)
			}
			said = append(said, app.Name+" is kept")
		}
	}
	note := strings.Join(said, "; ")
	switch {
	case note == "" && cmd.Verb == render.CommandKeep:
		note = "kept"
	case note == "":
		note = "no environment to act on"
	}
	if cmd.Verb == render.CommandKeep {
		note += "; expiry is suspended until `/petri extend <duration>`"
	}
	return done(provider.ReactionAccepted, "accepted", note, func(state *render.State) {
		// Every command but sleep is activity: sleepAfter counts from it.
		if cmd.Verb != render.CommandSleep {
			state.ActiveAt = at
		}
		if state.ActiveSHA == "" {
			state.ActiveSHA = pr.HeadSHA
		}
		switch cmd.Verb {
		case render.CommandKeep:
			state.Kept = true
		case render.CommandExtend:
			state.Kept = false
			for name, a := range st.Apps {
				cur := state.App(name)
				cur.ExtendedUntil = a.ExtendedUntil
			}
		}
		for _, name := range revive {
			state.App(name).Revive()
		}
	})
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

// annotationTime reads an RFC 3339 annotation; zero when absent or not a
// time.
func annotationTime(e *petriv1.EphemeralEnvironment, key string) time.Time {
	v := e.Annotations[key]
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// annotate sets one annotation on an environment sync owns with
// server-side apply, under a field manager of that annotation's own: sync
// owns exactly it, a later apply of another annotation (or of the spec)
// leaves it alone, and an annotation a person set with kubectl is taken
// over only when sync sets it. The UID makes sure it is the same object.
func (s *Syncer) annotate(ctx context.Context, e *petriv1.EphemeralEnvironment, key, value string) error {
	if e == nil || !render.Owned(e.Labels) {
		return fmt.Errorf("refusing to annotate an environment that sync does not own")
	}
	if e.Annotations[key] == value {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(petriv1.GroupVersion.String())
	u.SetKind("EphemeralEnvironment")
	u.SetNamespace(e.Namespace)
	u.SetName(e.Name)
	u.SetUID(e.UID)
	u.SetAnnotations(map[string]string{key: value})
	manager := render.FieldManager + "-" + key[strings.LastIndex(key, "/")+1:]
	if err := s.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return fmt.Errorf("set %s on environment %s: %w", key, e.Name, err)
	}
	if e.Annotations == nil {
		e.Annotations = map[string]string{}
	}
	e.Annotations[key] = value
	s.opts.Metrics.Writes.WithLabelValues("EphemeralEnvironment", "annotate").Inc()
	return nil
}

// ErrUnknownEnvironment is returned by Wake for a name sync did not write.
var ErrUnknownEnvironment = errors.New("no such environment")

// ErrEnvironmentDeleting is returned by Wake for an environment being
// deleted.
var ErrEnvironmentDeleting = errors.New("the environment is being deleted")

// Wake asks an environment sync wrote to wake, as `/petri wake` does: it
// sets petri.dev/wake-requested to now. Any replica may: it is a person's
// request, carried out as kubectl annotate would, and the leader reads it
// from the annotation. It returns the time it set.
func (s *Syncer) Wake(ctx context.Context, name string) (time.Time, error) {
	var e petriv1.EphemeralEnvironment
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: name}, &e); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return time.Time{}, fmt.Errorf("%w: %s", ErrUnknownEnvironment, name)
		}
		return time.Time{}, fmt.Errorf("read environment %s: %w", name, err)
	}
	if !render.Owned(e.Labels) {
		return time.Time{}, fmt.Errorf("%w: %s", ErrUnknownEnvironment, name)
	}
	if e.DeletionTimestamp != nil {
		return time.Time{}, fmt.Errorf("%w: %s", ErrEnvironmentDeleting, name)
	}
	now := metav1.Now().UTC().Truncate(time.Second)
	if err := s.annotate(ctx, &e, render.AnnotationWakeRequested, now.Format(time.RFC3339)); err != nil {
		return time.Time{}, err
	}
	s.log.Info("Wake requested through the read API", "environment", name)
	return now, nil
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
