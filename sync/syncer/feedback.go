// Feedback: the commit status per application and the one comment on each
// pull request, driven by the feedback queue that environment changes and
// reconciles fill.

package syncer

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

func (s *Syncer) envChanged(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	e, ok := o.(*petriv1.EphemeralEnvironment)
	if !ok || e.Spec.Source == nil {
		return
	}
	repo := render.RepositoryKey(e.Annotations)
	n, _ := strconv.Atoi(e.Labels[render.LabelPullRequest])
	if repo == "" || n == 0 {
		return
	}
	s.feedback.Add(prKey{repo, n})
}

// envGone queues the repository of an environment that is gone: under
// maxEnvironments its slot is free now, and a waiting pull request gets it
// at once rather than at the next resync.
func (s *Syncer) envGone(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	e, ok := o.(*petriv1.EphemeralEnvironment)
	if !ok || !render.Owned(e.Labels) {
		return
	}
	s.queueRepoOf(e)
}

// envLifecycleChanged queues the repository of an environment whose sleep
// or wake request changed (a person's kubectl annotate, the read API): the
// idle time before the next sleep is counted again.
func (s *Syncer) envLifecycleChanged(old, o any) {
	before, ok1 := old.(*petriv1.EphemeralEnvironment)
	e, ok2 := o.(*petriv1.EphemeralEnvironment)
	if !ok1 || !ok2 || !render.Owned(e.Labels) {
		return
	}
	for _, k := range []string{render.AnnotationWakeRequested, render.AnnotationSleepRequested} {
		if before.Annotations[k] != e.Annotations[k] {
			s.queueRepoOf(e)
			return
		}
	}
}

func (s *Syncer) queueRepoOf(e *petriv1.EphemeralEnvironment) {
	repo := render.RepositoryKey(e.Annotations)
	s.mu.Lock()
	ok := repo != "" && s.configured(repo)
	s.mu.Unlock()
	if ok && s.Leader() {
		s.queue.Add(repo)
	}
}

func (s *Syncer) processFeedback(ctx context.Context) bool {
	key, quit := s.feedback.Get()
	if quit {
		return false
	}
	defer s.feedback.Done(key)
	fctx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
	err := s.sendFeedback(fctx, key)
	cancel()
	var rle *provider.RateLimitError
	switch {
	case err == nil:
		s.feedback.Forget(key)
	case errors.As(err, &rle):
		s.feedback.Forget(key)
		s.feedback.AddAfter(key, rle.Until.Sub(s.clock.Now())+time.Second)
	default:
		s.log.Error(err, "Feedback on pull request failed; retrying", "repository", key.Repo, "pullRequest", key.Number)
		s.feedback.AddRateLimited(key)
	}
	return true
}

// sendFeedback posts the commit status of each application, the GitHub
// deployment statuses and the one comment of the pull request, when they
// differ from what was posted.
func (s *Syncer) sendFeedback(ctx context.Context, key prKey) error {
	unlock := s.lockPR(key)
	defer unlock()
	return s.feedbackLocked(ctx, key)
}

// indexPullRequest indexes sync's cache of environments by repository and
// pull request (pullRequestKey). Feedback lists a pull request's
// environments on every change of one of them; a label selector on the
// number alone made the cache walk and copy every environment with that
// number in any repository (docs/benchmarks.md has what that cost).
const indexPullRequest = "petri.dev/pull-request"

// pullRequestKey is the index key of a repository's pull request (repo is
// the repository's key); forges name repositories case-insensitively.
func pullRequestKey(repo, number string) string { return strings.ToLower(repo) + "#" + number }

// pullRequestIndex gives an environment sync wrote its pull request's key.
func pullRequestIndex(o client.Object) []string {
	e, ok := o.(*petriv1.EphemeralEnvironment)
	if !ok || !render.Owned(e.Labels) {
		return nil
	}
	repo, n := render.RepositoryKey(e.Annotations), e.Labels[render.LabelPullRequest]
	if repo == "" || n == "" {
		return nil
	}
	return []string{pullRequestKey(repo, n)}
}

// feedbackLocked is sendFeedback for a caller that holds the pull
// request's lock. The comment carries the lifecycle state: it is written
// only once that state is read from the store, never over it.
func (s *Syncer) feedbackLocked(ctx context.Context, key prKey) error {
	states, rs, closed, envFound, err := s.feedbackStates(ctx, key)
	if err != nil {
		return err
	}
	if len(states) == 0 {
		// No environment to wait for: a merge group gets its success.
		return s.mergeGroupFeedback(ctx, key, rs, states, nil, false)
	}
	// Behind: nothing is said on the pull request yet, but the state is
	// stored (a command handled, an expiry decided must be). The watch
	// shows sync's own write in a moment, and its event asks for this
	// feedback again; the look after unseenWait is for a write it never
	// shows.
	behind := s.cacheBehind(key, states)
	if behind {
		s.feedback.AddAfter(key, unseenWait)
	}
	// The lifecycle state is remembered in the repository's state, which a
	// repository of the config sync has none of yet is given.
	remember := rs
	if remember == nil {
		remember = s.memory.configuredRepo(key.Repo)
	}
	life, err := s.ensureLife(ctx, remember, key)
	if err != nil {
		return err
	}
	s.lifecycleFeedback(key, states, life, closed)

	var list []render.PRState
	var errs []error
	// The write budget (budget.go): what is not due yet is looked at
	// again when it is.
	now, pressed := s.clock.Now(), s.budget.pressedUntil(key.Repo)
	var wait time.Duration
	later := func(d time.Duration) {
		if d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}
	for _, app := range slices.Sorted(maps.Keys(states)) {
		st := states[app]
		list = append(list, st)
		if behind {
			continue
		}
		if err := s.deployment(ctx, key, st, life); err != nil {
			errs = append(errs, err)
		}
		cs, ok := render.CommitStatus(st)
		if !ok || st.HeadSHA == "" {
			continue
		}
		d, err := s.budgetedStatus(ctx, key, rs, life, st, cs, now, pressed)
		if err != nil {
			errs = append(errs, err)
		}
		later(d)
	}
	if err := s.mergeGroupFeedback(ctx, key, rs, states, life, behind); err != nil {
		errs = append(errs, err)
	}
	d, err := s.saveState(ctx, key, list, life, !behind, now, pressed)
	if err != nil {
		errs = append(errs, err)
	}
	later(d)
	if wait > 0 {
		s.feedback.AddAfter(key, wait+10*time.Millisecond)
	}
	if len(errs) > 0 {
		s.budget.refused(key.Repo, errors.Join(errs...))
	}
	if len(errs) == 0 && wait == 0 && closed && !envFound && !behind && len(life.current().MergeGroups) == 0 {
		// The closed pull request's last word is posted and its
		// environments are gone: nothing more will be said about it.
		if err := s.store.Forget(ctx, key); err != nil {
			return err
		}
		s.forgetPullRequest(key)
	}
	return errors.Join(errs...)
}

// feedbackStates is what sync says of a pull request: each application's
// state as the repository's pass left it, with the environment the cache
// shows of it; whether the pull request is closed, and whether any of its
// environments is still there.
func (s *Syncer) feedbackStates(ctx context.Context, key prKey) (states map[string]render.PRState, rs *repoState, closed, envFound bool, err error) {
	var envs petriv1.EphemeralEnvironmentList
	if err := s.cache.List(ctx, &envs, client.InNamespace(s.opts.Namespace), client.MatchingFields{indexPullRequest: pullRequestKey(key.Repo, strconv.Itoa(key.Number))}); err != nil {
		return nil, nil, false, false, err
	}
	s.mu.Lock()
	rs = s.repos[key.Repo]
	s.mu.Unlock()
	states = map[string]render.PRState{}
	if rs != nil {
		rs.mu.Lock()
		for app, st := range rs.prs[key.Number] {
			states[app] = *st
		}
		closed = rs.closed[key.Number]
		rs.mu.Unlock()
	}
	for i := range envs.Items {
		e := &envs.Items[i]
		if !render.Owned(e.Labels) || render.RepositoryKey(e.Annotations) != key.Repo {
			continue
		}
		envFound = true
		app := e.Labels[render.LabelApplication]
		st, ok := states[app]
		if !ok {
			st = render.PRState{Application: app, Repository: key.Repo, Number: key.Number, URL: e.Annotations[render.AnnotationURL]}
			if e.Spec.Source != nil {
				st.HeadSHA = e.Spec.Source.SHA
			}
		}
		st.Env = e
		st.Deleted = ""
		if st.URL == "" {
			st.URL = e.Annotations[render.AnnotationURL]
		}
		states[app] = st
	}
	return states, rs, closed, envFound, nil
}

// cacheBehind tells whether the cache does not show yet one of sync's own
// writes of the pull request's environments (each application's in
// states, Env the cache's copy). Feedback from that copy would say what
// the write just changed (the previous commit, a status of "waiting to
// deploy" the new one), to be written over at once: two commit statuses
// and two edits of the comment for one push.
func (s *Syncer) cacheBehind(key prKey, states map[string]render.PRState) bool {
	now := s.clock.Now()
	for app, st := range states {
		name := render.EnvironmentName(app, key.Repo, key.Number)
		if st.Env != nil {
			name = st.Env.Name
		}
		if s.writes.unseen(name, st.Env, now) {
			return true
		}
	}
	return false
}

// commitStatus posts a commit status unless it is the one last posted for
// that commit and context (remembered per repository of the config). The
// reporter is told of a commit that became a head while this process led.
func (s *Syncer) commitStatus(ctx context.Context, key prKey, rs *repoState, sha string, cs provider.CommitStatus) error {
	sk := statusKey{sha, cs.Context}
	reporter := s.reporterOf(key.Repo)
	if rs != nil {
		rs.mu.Lock()
		last, posted := rs.statuses[sk]
		fresh := rs.newHeads[sha]
		rs.mu.Unlock()
		if posted && last == cs {
			return nil
		}
		if nc, ok := reporter.(provider.NewCommits); ok && fresh && !posted {
			nc.NewCommit(pathOf(key.Repo), sha, cs.Context)
		}
	}
	if err := reporter.SetCommitStatus(ctx, pathOf(key.Repo), sha, cs); err != nil {
		return err
	}
	if rs != nil {
		rs.mu.Lock()
		rs.statuses[sk] = cs
		rs.mu.Unlock()
	}
	return nil
}

// lifecycleFeedback fills the lifecycle of each application's state from
// the application and the pull request's state: the ttl started at the
// first Ready of the head commit, the expiry and its warning (asking to be
// called again when the warning is due), what keeps it, an expiry that
// happened.
func (s *Syncer) lifecycleFeedback(key prKey, states map[string]render.PRState, life *prLife, closed bool) {
	now := s.clock.Now()
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	life.mu.Lock()
	defer life.mu.Unlock()
	for name, st := range states {
		var app *config.Application
		if cfg != nil {
			app = cfg.Application(name)
		}
		if app == nil || app.RepositoryKey() != key.Repo {
			continue
		}
		st.KeepLabel = app.Keep()
		if app.SleepAfter != nil {
			st.SleepAfter = app.SleepAfter.Duration
		}
		if app.TTL != nil {
			st.TTL = app.TTL.Duration
			if !closed && st.Env != nil && st.Env.DeletionTimestamp == nil {
				observeReady(&life.state, name, st.Env, st.HeadSHA, now)
			}
			a := life.state.Apps[name]
			st.KeptBy = keptBy(app, st.Labels, life.state)
			if exp := a.ExpiresAt(st.TTL, st.HeadSHA); !exp.IsZero() && st.Env != nil && st.Env.DeletionTimestamp == nil {
				st.ExpiresAt = exp
				warn := exp.Add(-render.WarnBefore(st.TTL))
				st.ExpiryWarning = !now.Before(warn)
				// Looked at again when the warning and the expiry are due
				// (one that is past is the reconcile's to act on).
				if !st.ExpiryWarning && st.KeptBy == "" {
					s.feedback.AddAfter(key, warn.Sub(now)+10*time.Millisecond)
				}
				if st.KeptBy == "" && exp.After(now) {
					s.queue.AddAfter(key.Repo, exp.Sub(now)+10*time.Millisecond)
				}
			}
			if a != nil && a.ExpiredSHA != "" && a.ExpiredSHA == st.HeadSHA && st.Deleted == "" && !closed {
				st.ExpiredSHA, st.ExpiredAt = a.ExpiredSHA, a.ExpiredAt
			}
		}
		states[name] = st
	}
}

// budgetedStatus posts a commit status when the write budget says it is
// due (budget.go), and otherwise returns when it is.
func (s *Syncer) budgetedStatus(ctx context.Context, key prKey, rs *repoState, life *prLife, st render.PRState, cs provider.CommitStatus, now, pressed time.Time) (time.Duration, error) {
	sk := statusKey{st.HeadSHA, cs.Context}
	first := true
	if rs != nil {
		rs.mu.Lock()
		last, posted := rs.statuses[sk]
		rs.mu.Unlock()
		if posted && last == cs {
			life.statusShown(sk)
			return 0, nil
		}
		first = !posted
	}
	send, wait := due(render.Settled(st), first, life.statusStale(sk, now), now, s.budget.patience, pressed)
	if !send {
		return wait, nil
	}
	if err := s.commitStatus(ctx, key, rs, st.HeadSHA, cs); err != nil {
		return 0, err
	}
	life.statusShown(sk)
	return 0, nil
}

// saveState stores the pull request's state whenever it changed, and,
// with comment, writes sync's comment once there is something to say and
// the write budget says it is due (budget.go); otherwise it returns when
// it is.
func (s *Syncer) saveState(ctx context.Context, key prKey, list []render.PRState, life *prLife, comment bool, now, pressed time.Time) (time.Duration, error) {
	state := life.current()
	worth := len(state.Notes) > 0
	expires := map[string]time.Time{}
	for _, st := range list {
		if st.Env != nil || st.Waiting != "" || st.Error != "" || st.Deleted != "" || st.Expired() {
			worth = true
		}
		if !st.ExpiresAt.IsZero() {
			expires[st.Application] = st.ExpiresAt
		}
	}
	body := ""
	var wait time.Duration
	if worth && comment {
		body = render.Comment(list, state)
		last, notes, stale := life.commentShown(body, now)
		// A reply to a command is told at once.
		settled := allSettled(list) || (notesOf(state) != notes && len(state.Notes) > 0)
		if body == last {
			body = ""
		} else if send, d := due(settled, false, stale, now, s.budget.patience, pressed); !send {
			body, wait = "", d
		}
	}
	if err := s.store.Save(ctx, key, body, state, expires); err != nil {
		return 0, err
	}
	life.mu.Lock()
	life.saved = state
	if body != "" {
		life.shown.body, life.shown.notes, life.shown.bodyStale = body, notesOf(state), time.Time{}
	}
	life.mu.Unlock()
	return wait, nil
}
