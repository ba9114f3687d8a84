// Commands: the /petri commands people write on a pull request, found in
// webhooks, in events a follower handed over and in the resync's comment
// listing; each is checked against its author's permission, acted on once,
// and answered with a reaction and a line in sync's comment.

package syncer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

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
		cs, err := s.commands.ListComments(ctx, repo, n)
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
		cs, err := s.commands.ListRepositoryComments(ctx, repo, since)
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
		if err := s.commands.React(ctx, repo, c.ID, reaction); err != nil {
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
	perm, err := s.commands.Permission(ctx, repo, c.Author)
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
