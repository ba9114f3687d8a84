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

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

const (
	// commandGrace: on a pull request where sync finds no state of its own
	// (its comment is new, or was deleted), only commands younger than this
	// are acted on; older ones count as handled.
	commandGrace = 10 * time.Minute
	// maxPendingCommands bounds the commands kept per pull request from
	// webhooks; beyond it the pull request's comments are listed instead.
	maxPendingCommands = 32
	// commentsStep is how far the since of a repository's comment listing
	// must be able to move before it moves: between steps its URL, and so
	// its conditional request, stay the same.
	commentsStep = 10 * time.Minute
	// commentsMargin keeps the since of that listing this far behind the
	// newest comment it returned, for clocks that differ.
	commentsMargin = time.Minute
	// commandAttempts and commandRetryFor bound a command that keeps
	// failing (its author's permission, its effect or its reaction cannot
	// be had): it is tried again, and the commands after it wait, until it
	// has failed this many times over at least this long; then it is
	// given up, answered as refused, and the commands after it are acted
	// on. A forge's short outage is waited out; a command that can never
	// be carried out holds its pull request for minutes, not for good.
	commandAttempts = 5
	commandRetryFor = 10 * time.Minute
)

// commander reads and carries out the commands on a repository's pull
// requests. feedback is the feedback of a pull request whose lock the
// caller holds (feedback.go): a handled command is answered at once.
type commander struct {
	lives    *lives
	writer   *writer
	feedback func(ctx context.Context, key prKey) error
	clock    clock.Clock
	metrics  *metrics.Metrics
	log      logr.Logger
}

// runCommands finds the commands on the pull requests of interest and acts
// on them, oldest first per pull request, before the plan is decided: a
// command changes what the plan sees (an expired environment brought back,
// a ttl extended). Commands on a pull request that is closed or not
// matching are dropped; those on one whose state is unknown wait.
func (cm *commander) runCommands(ctx context.Context, o *observation) error {
	var rle *provider.RateLimitError
	if err := cm.findCommands(ctx, o); err != nil {
		if errors.As(err, &rle) {
			return err
		}
		o.errs = append(o.errs, err)
	}
	rs := o.rs
	rs.mu.Lock()
	var withCommands []int
	for n := range rs.commands {
		switch {
		case !o.interested(n):
			delete(rs.commands, n)
			delete(rs.failing, n)
		case !o.unknown[n]:
			withCommands = append(withCommands, n)
		}
	}
	rs.mu.Unlock()
	slices.Sort(withCommands)
	for _, n := range withCommands {
		if err := cm.handleCommands(ctx, o.rs, o.forge, o.openBy[n], o.apps, o.envsOf(n)); err != nil {
			if errors.As(err, &rle) {
				return err
			}
			o.errs = append(o.errs, err)
		}
	}
	return nil
}

// findCommands lists comments to find commands whose webhook did not reach
// this replica: the pull requests another replica named (hints) and, on a
// periodic resync, the whole repository since a watermark.
func (cm *commander) findCommands(ctx context.Context, o *observation) error {
	rs, repo := o.rs, o.repo
	rs.mu.Lock()
	hints := rs.commentHints
	rs.commentHints = map[int]bool{}
	resync := o.resync
	since := rs.commentsSince
	if since.IsZero() {
		since = cm.clock.Now().Add(-commandGrace)
	}
	rs.mu.Unlock()
	var errs []error
	for n := range hints {
		if !o.interested(n) {
			continue
		}
		cs, err := o.forge.commands.ListComments(ctx, o.forge.path, n)
		if err != nil {
			rs.mu.Lock()
			rs.commentHints[n] = true
			rs.mu.Unlock()
			errs = append(errs, fmt.Errorf("list comments of %s#%d: %w", repo, n, err))
			continue
		}
		rs.takeCommands(cs, o.interested)
	}
	if !resync {
		return errors.Join(errs...)
	}
	cs, err := o.forge.commands.ListRepositoryComments(ctx, o.forge.path, since)
	if err != nil {
		rs.mu.Lock()
		rs.resyncDue = true
		rs.mu.Unlock()
		return errors.Join(append(errs, err)...)
	}
	rs.takeCommands(cs, o.interested)
	o.resynced = true
	newest := since
	for _, c := range cs {
		if c.UpdatedAt.After(newest) {
			newest = c.UpdatedAt
		}
	}
	rs.mu.Lock()
	rs.commentsSince = since
	if next := newest.Add(-commentsMargin); next.Sub(since) >= commentsStep {
		rs.commentsSince = next
	}
	rs.mu.Unlock()
	return errors.Join(errs...)
}

// takeCommands keeps the commands among comments that are newer than what
// their pull request's state counts as handled.
func (rs *repoState) takeCommands(cs []provider.Comment, interested func(int) bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, c := range cs {
		l := rs.life[c.Number]
		// l's lock is rs.mu, held here.
		if !interested(c.Number) || l == nil || c.ID <= l.state.LastCommand || !isCommand(c, render.State{}) {
			continue
		}
		rs.addCommand(c)
	}
}

// handleCommands acts on a pull request's pending commands, oldest first,
// each once: the effect, then the reaction, then the state (the last
// command handled, the reply), then the comment.
func (cm *commander) handleCommands(ctx context.Context, rs *repoState, forge repoForge, pr provider.PullRequest, apps []*config.Application, envs map[string]*petriv1.EphemeralEnvironment) error {
	key := prKey{rs.name, pr.Number}
	unlock := cm.lives.lockPR(key)
	defer unlock()
	l, err := cm.lives.ensureLife(ctx, rs, key)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	pending := rs.commands[pr.Number]
	delete(rs.commands, pr.Number)
	rs.mu.Unlock()
	slices.SortFunc(pending, func(a, b provider.Comment) int { return cmp.Compare(a.ID, b.ID) })
	handled := false
	for i, c := range pending {
		if c.ID <= l.lastCommand() {
			continue
		}
		err := cm.command(ctx, forge, key, pr, c, apps, envs, l)
		if err != nil && cm.giveUp(ctx, rs, key, c, err) {
			err = cm.refuseFailed(ctx, forge, key, c, l)
		}
		if err != nil {
			rs.mu.Lock()
			for _, p := range pending[i:] {
				rs.addCommand(p)
			}
			rs.mu.Unlock()
			if handled {
				return errors.Join(err, cm.feedback(ctx, key))
			}
			return err
		}
		rs.commandHandled(pr.Number)
		handled = true
	}
	if !handled {
		return nil
	}
	return cm.feedback(ctx, key)
}

// giveUp counts a failure of a command and reports whether the command is
// given up: it has failed commandAttempts times over commandRetryFor. A
// rate limit or the end of the leadership is no failure of the command.
func (cm *commander) giveUp(ctx context.Context, rs *repoState, key prKey, c provider.Comment, err error) bool {
	var rle *provider.RateLimitError
	if errors.As(err, &rle) || ctx.Err() != nil {
		return false
	}
	now := cm.clock.Now()
	rs.mu.Lock()
	f := rs.failing[key.Number]
	if f.id != c.ID {
		f = commandFailure{id: c.ID, since: now}
	}
	f.times++
	rs.failing[key.Number] = f
	rs.mu.Unlock()
	if f.times < commandAttempts || now.Sub(f.since) < commandRetryFor {
		return false
	}
	cm.log.Error(err, "Pull-request command keeps failing; giving it up", "repository", key.Repo, "pullRequest", key.Number,
		"comment", c.ID, "author", c.Author, "failures", f.times, "since", f.since)
	return true
}

// refuseFailed answers a command that was given up: refused, with a line
// in sync's comment that says so and not why (the log does). The reaction
// is left if it can be; the command counts as handled either way.
func (cm *commander) refuseFailed(ctx context.Context, forge repoForge, key prKey, c provider.Comment, l *prLife) error {
	cmd, _ := render.ParseCommand(c.Body)
	if err := forge.commands.React(ctx, forge.path, c.ID, provider.ReactionRefused); err != nil {
		var rle *provider.RateLimitError
		if errors.As(err, &rle) {
			return err
		}
		cm.log.Error(err, "Reacting to a command given up failed; recording it as handled all the same", "repository", key.Repo, "pullRequest", key.Number, "comment", c.ID)
	}
	l.change(func(st *render.State) {
		st.Note(fmt.Sprintf("`%s` from @%s: given up: it kept failing for %s; see sync's log", cmd.Text, c.Author, render.FormatDuration(commandRetryFor)))
		st.LastCommand = c.ID
	})
	verb := cmd.Verb
	if verb == "" {
		verb = "unknown"
	}
	cm.metrics.Commands.WithLabelValues(verb, "failed").Inc()
	return nil
}

// command handles one command comment: parsed, its author's permission
// checked, its effect carried out, then answered.
func (cm *commander) command(ctx context.Context, forge repoForge, key prKey, pr provider.PullRequest, c provider.Comment, apps []*config.Application, envs map[string]*petriv1.EphemeralEnvironment, l *prLife) error {
	log := cm.log.WithValues("repository", key.Repo, "pullRequest", pr.Number, "comment", c.ID, "author", c.Author)
	cmd, perr := render.ParseCommand(c.Body)
	if errors.Is(perr, render.ErrNoCommand) {
		return nil
	}
	who := "@" + c.Author
	text := "`" + cmd.Text + "`"
	done := func(reaction, result, note string, change func(st *render.State)) error {
		if err := forge.commands.React(ctx, forge.path, c.ID, reaction); err != nil {
			if !errors.Is(err, provider.ErrNotFound) {
				return err
			}
			// Deleted since it was read: handled all the same.
			log.Info("Command comment deleted before its reaction", "command", cmd.Text)
		}
		l.change(func(st *render.State) {
			if change != nil {
				change(st)
			}
			st.Note(fmt.Sprintf("%s from %s: %s", text, who, note))
			st.LastCommand = c.ID
		})
		verb := cmd.Verb
		if result == "invalid" {
			verb = "unknown"
		}
		cm.metrics.Commands.WithLabelValues(verb, result).Inc()
		log.Info("Pull-request command handled", "command", cmd.Text, "result", result)
		return nil
	}
	if perr != nil {
		return done(provider.ReactionRefused, "invalid", "not understood: "+perr.Error(), nil)
	}
	perm, err := forge.commands.Permission(ctx, forge.path, c.Author)
	if errors.Is(err, provider.ErrNotFound) {
		// The forge does not know the author (an account deleted since
		// it commented): no permission, as a stranger has.
		perm, err = provider.PermissionNone, nil
	}
	if err != nil {
		return fmt.Errorf("command %s on %s#%d: %w", cmd.Text, key.Repo, pr.Number, err)
	}
	if perm != provider.PermissionAdmin && perm != provider.PermissionWrite {
		return done(provider.ReactionRefused, "refused", fmt.Sprintf("refused: %s needs write access to %s (has %s)", who, forge.path, perm), nil)
	}
	now := cm.clock.Now()
	at := c.CreatedAt
	if at.IsZero() || at.After(now) {
		at = now
	}
	eff, err := cm.commandEffect(ctx, cmd, c.ID, pr, apps, envs, l.current(), at, now)
	if err != nil {
		return err
	}
	return done(provider.ReactionAccepted, "accepted", eff.note(cmd.Verb), func(state *render.State) {
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
			for name, a := range eff.state.Apps {
				cur := state.App(name)
				cur.ExtendedUntil = a.ExtendedUntil
			}
		}
		for _, name := range eff.revive {
			state.App(name).Revive()
		}
	})
}

// commandEffect is what a command did to a pull request's environments.
type commandEffect struct {
	// said is a line per application; revive the applications whose
	// expired environment comes back; state the state with the ttls it
	// extended.
	said   []string
	revive []string
	state  render.State
}

// note is the reply to the command.
func (e commandEffect) note(verb string) string {
	note := strings.Join(e.said, "; ")
	switch {
	case note == "" && verb == render.CommandKeep:
		note = "kept"
	case note == "":
		note = "no environment to act on"
	}
	if verb == render.CommandKeep {
		note += "; expiry is suspended until `/petri extend <duration>`"
	}
	return note
}

// commandEffect carries out a command on each application's environment
// (an annotation the operator acts on) or on its state (an extended ttl,
// an expired environment brought back).
func (cm *commander) commandEffect(ctx context.Context, cmd render.Command, id int64, pr provider.PullRequest, apps []*config.Application, envs map[string]*petriv1.EphemeralEnvironment, st render.State, at, now time.Time) (commandEffect, error) {
	eff := commandEffect{state: st}
	stamp := at.UTC().Format(time.RFC3339)
	comeBack := func(app string) {
		eff.revive, eff.said = append(eff.revive, app), append(eff.said, app+" comes back (it had expired)")
	}
	for _, app := range apps {
		e := envs[app.Name]
		live := e != nil && e.DeletionTimestamp == nil
		a := st.Apps[app.Name]
		expired := a != nil && a.ExpiredSHA != "" && a.ExpiredSHA == pr.HeadSHA
		if !live && !expired {
			continue
		}
		var annotations [][2]string
		switch cmd.Verb {
		case render.CommandRedeploy:
			if expired {
				comeBack(app.Name)
				continue
			}
			annotations = [][2]string{{render.AnnotationWakeRequested, stamp}, {render.AnnotationRedeploy, fmt.Sprintf("comment-%d", id)}}
			eff.said = append(eff.said, app.Name+" deploys every component again")
		case render.CommandSleep:
			if expired {
				continue
			}
			annotations = [][2]string{{render.AnnotationSleepRequested, stamp}}
			eff.said = append(eff.said, app.Name+" goes to sleep")
		case render.CommandWake:
			if expired {
				comeBack(app.Name)
				continue
			}
			annotations = [][2]string{{render.AnnotationWakeRequested, stamp}}
			eff.said = append(eff.said, app.Name+" wakes up")
		case render.CommandExtend:
			eff.said = append(eff.said, extend(app, &eff, pr.HeadSHA, cmd.Duration, expired, now))
		case render.CommandKeep:
			if expired {
				eff.revive = append(eff.revive, app.Name)
			}
			eff.said = append(eff.said, app.Name+" is kept")
		}
		for _, kv := range annotations {
			if err := cm.writer.annotate(ctx, e, kv[0], kv[1]); err != nil {
				return eff, err
			}
		}
	}
	return eff, nil
}

// extend extends an application's ttl in eff's state and says until when.
func extend(app *config.Application, eff *commandEffect, head string, d time.Duration, expired bool, now time.Time) string {
	if app.TTL == nil {
		return app.Name + " has no ttl"
	}
	if expired {
		eff.revive = append(eff.revive, app.Name)
	}
	aa := eff.state.App(app.Name)
	if expired {
		aa.Revive()
	}
	aa.Extend(app.TTL.Duration, head, d, now)
	if exp := aa.ExpiresAt(app.TTL.Duration, head); !exp.IsZero() {
		return fmt.Sprintf("%s expires at %s", app.Name, render.FormatTime(exp))
	}
	return fmt.Sprintf("%s expires no earlier than %s", app.Name, render.FormatTime(aa.ExtendedUntil))
}

// commandFailure counts the failures of the command a pull request's
// commands wait behind (the oldest not handled): only that one is tried.
type commandFailure struct {
	id    int64
	since time.Time
	times int
}

// commandHandled forgets the failures of a pull request's command once it
// is handled.
func (rs *repoState) commandHandled(number int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.failing, number)
}

// addCommand keeps a command comment for the reconcile, once. The caller
// holds rs.mu.
func (rs *repoState) addCommand(c provider.Comment) {
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
