// Intake: what puts repositories on the work queue. The config repository
// is fetched on a ticker or on a push to it, every repository is resynced
// periodically, and accepted webhooks are recorded (pull request snapshots,
// passed gates) before their repository is queued; a replica that does not
// lead records them on the repository's Repository instead (refresh.go).

package syncer

import (
	"context"
	"strings"
	"time"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/webhook"
)

// TriggerConfigFetch asks for a fetch of the config repository now.
func (s *Syncer) TriggerConfigFetch() {
	select {
	case s.configTrigger <- struct{}{}:
	default:
	}
}

func (s *Syncer) configLoop(ctx context.Context) {
	t := s.clock.NewTicker(s.opts.ConfigInterval)
	defer t.Stop()
	for {
		s.loadConfig(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.configTrigger:
		}
	}
}

// loadConfig fetches the config repository and keeps its current revision.
// Every replica does, for the read API and to know which events matter;
// only the leader applies it: the shared workloads are written and every
// repository is queued when the revision changed, or when a full resync is
// due (a new leader), even with the last revision when the fetch fails.
func (s *Syncer) loadConfig(ctx context.Context) {
	// The full load a new leader asks for is done only by a load that
	// applies as the leader (asLeader below clears it): one that started
	// before the leadership leaves it to the next.
	full := s.fullResync.Load()
	snap, err := s.opts.Config.Fetch(ctx)
	var cfg, prev *config.Config
	var old []string
	if err != nil {
		s.log.Error(err, "Fetching the config repository failed; keeping the last revision")
		s.mu.Lock()
		s.configErr = err
		cfg = s.cfg
		s.mu.Unlock()
		if !full || cfg == nil {
			// Without any revision a new leader's full resync waits for the
			// first one, which is applied as a change anyway.
			return
		}
		old = cfg.Repositories()
	} else {
		s.mu.Lock()
		s.configErr = nil
		same := s.cfg != nil && s.cfg.Revision == snap.Revision
		cfg = s.cfg
		s.mu.Unlock()
		if same && !full {
			return
		}
		prev = cfg
		if same {
			old = cfg.Repositories()
		} else {
			cfg, old = s.setConfig(snap)
		}
	}
	s.asLeader(func(ctx context.Context) {
		s.fullResync.Store(false)
		// Bounded like a reconcile, so that a chart repository or an API
		// server that does not answer cannot hold up the config loop.
		actx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
		err := s.applySharedWorkloads(actx, cfg)
		cancel()
		if err != nil {
			s.log.Error(err, "Applying shared workloads failed")
		}
		pctx, cancel := context.WithTimeout(ctx, s.opts.ReconcileTimeout)
		if err := s.pruneStates(pctx, cfg, prev); err != nil {
			s.log.Error(err, "Pruning the pull-request states of repositories that left the config failed; trying again at the next revision")
		}
		cancel()
		for _, r := range append(old, cfg.Repositories()...) {
			s.queue.Add(r)
		}
	})
}

// setConfig parses and keeps a new revision; it returns it and the
// repositories of the one before.
func (s *Syncer) setConfig(snap *configrepo.Snapshot) (*config.Config, []string) {
	cfg := config.Load(snap.Files)
	cfg.Revision = snap.Revision
	// An application on a forge sync has no credentials for is an error
	// of its file; the others run.
	cfg.DropUnserved(s.forges.Serves)
	for _, e := range cfg.Errors {
		s.log.Error(e, "Config file has an error; its application is left as it was", "revision", snap.Revision)
	}
	s.opts.Metrics.ConfigErrors.Set(float64(len(cfg.Errors)))
	s.mu.Lock()
	var old []string
	if s.cfg != nil {
		old = s.cfg.Repositories()
	}
	s.cfg = cfg
	s.fileRepos = fileRepositories(s.fileRepos, cfg)
	// What belonged to repositories and applications that left the config
	// is forgotten; their environments are left as they are.
	for _, r := range old {
		if !s.configured(r) {
			s.forgetRepo(r)
		}
	}
	apps := map[string]bool{}
	for _, a := range cfg.Applications {
		apps[a.Name] = true
	}
	for name := range s.appStatus {
		if !apps[name] {
			delete(s.appStatus, name)
			s.opts.Metrics.Environments.DeleteLabelValues(name)
		}
	}
	s.mu.Unlock()
	s.log.Info("Loaded config revision", "revision", snap.Revision, "applications", len(cfg.Applications), "sharedWorkloads", len(cfg.SharedWorkloads), "errors", len(cfg.Errors))
	return cfg, old
}

func (s *Syncer) resyncLoop(ctx context.Context) {
	t := s.clock.NewTicker(s.opts.ResyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		s.Resync()
	}
}

// Resync enqueues every repository now, as the periodic resync does: each
// lists its open pull requests and, for commands whose webhook never
// arrived, its recent comments.
func (s *Syncer) Resync() {
	s.mu.Lock()
	var repos []string
	if s.cfg != nil {
		repos = s.cfg.Repositories()
	}
	var due []*repoState
	for _, r := range repos {
		due = append(due, s.repo(r))
	}
	s.mu.Unlock()
	for _, rs := range due {
		rs.mu.Lock()
		rs.resyncDue = true
		rs.mu.Unlock()
	}
	for _, r := range repos {
		s.queue.Add(r)
	}
}

// eventLoop takes the accepted webhooks: the replica that acts keeps each
// in its memory and queues its repository (handleEvent); another records
// them on the Repositories for the leader, in one write per repository for
// what waits, and retries with back-off while the API server refuses.
// When ctx ends, what was not recorded yet and the events still queued are
// recorded, for the leader or the next one.
func (s *Syncer) eventLoop(ctx context.Context) {
	pending := marks{}
	defer s.lastMarks(ctx, pending)
	var retry <-chan time.Time
	backoff := markBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry:
			retry = nil
		case ev := <-s.events:
			s.intake(ev, pending)
			// What else waits goes into the same write.
			for drained := false; !drained; {
				select {
				case ev := <-s.events:
					s.intake(ev, pending)
				default:
					drained = true
				}
			}
		}
		if len(pending) == 0 || retry != nil {
			continue
		}
		if err := s.refresh.record(ctx, pending); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error(err, "Recording webhooks for the leader failed; retrying", "repositories", len(pending), "retryIn", backoff)
			retry = s.clock.After(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = markBackoff
	}
}

// intake acts on a webhook when this replica acts (always, without leader
// election), and otherwise adds its mark to pending.
func (s *Syncer) intake(ev webhook.Event, pending marks) {
	if s.refresh == nil || s.Leader() {
		s.handleEvent(ev)
		return
	}
	if key, name, ok := s.markOf(ev); ok {
		pending.add(key, name, ev.Received)
	}
}

func (s *Syncer) handleEvent(ev webhook.Event) {
	key := config.RepositoryKey(ev.Forge, ev.Repository)
	if ev.Type == "push" && s.isConfigRepo(ev) {
		s.log.Info("Config repository pushed; fetching", "ref", ev.Ref)
		s.TriggerConfigFetch()
		return
	}
	r := s.configuredRepo(key)
	if r == nil {
		// No application watches it (an organisation's webhook sends every
		// repository's events): nothing to reconcile, nothing to remember. A
		// config revision that adds it reconciles it then.
		return
	}
	if ev.Type == "merge_group" && ev.MergeGroup != nil {
		// Nothing to reconcile: the pull request's feedback posts on the
		// group (mergequeue.go).
		r.mu.Lock()
		r.noteGroup(ev.MergeGroup.Number, ev.MergeGroup.HeadSHA, !ev.MergeGroup.Destroyed)
		r.mu.Unlock()
		s.feedback.Add(prKey{key, ev.MergeGroup.Number})
		return
	}
	r.mu.Lock()
	if r.pendingSince.IsZero() {
		r.pendingSince = ev.Received
	}
	switch ev.Type {
	case "pull_request":
		if ev.PullRequest == nil {
			// Nothing to keep: the reconcile lists the pull requests.
			r.listing = nil
			break
		}
		pr := *ev.PullRequest
		if old, ok := r.snapshots[pr.Number]; !ok || !pr.UpdatedAt.Before(old.UpdatedAt) {
			r.snapshots[pr.Number] = pr
			boundSnapshots(r.snapshots, MaxSnapshots)
		}
		r.sinceListing[pr.Number] = true
	case "status", "check_run":
		if ev.GateState == provider.GatePassed {
			// A check run passes the gate of its name and app, and the
			// gate of its name alone (which no fork's pull request passes).
			r.markPassed(ev.SHA, ev.Gate)
		}
	case "issue_comment":
		// A hint, as a recorded mark is: the command is read from the
		// pull request's comments through the API (its author and text as
		// GitHub has them), never taken from the delivery.
		if ev.Comment != nil && ev.Comment.Number > 0 {
			r.commentHints[ev.Comment.Number] = true
		}
	}
	r.mu.Unlock()
	s.queue.Add(key)
}

func (s *Syncer) isConfigRepo(ev webhook.Event) bool {
	want := normalizeRepo(s.opts.ConfigRepository)
	if want == "" {
		return false
	}
	if normalizeRepo(ev.Repository) == want {
		return true
	}
	for _, u := range ev.CloneURLs {
		if u != "" && normalizeRepo(u) == want {
			return true
		}
	}
	return false
}

// normalizeRepo reduces a repository URL or owner/name to host-less
// owner/name in lower case.
func normalizeRepo(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git")
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
		if j := strings.Index(s, "/"); j >= 0 {
			s = s[j+1:]
		}
	} else if i := strings.Index(s, ":"); i >= 0 && strings.Contains(s[:i], "@") {
		s = s[i+1:]
	}
	parts := strings.Split(s, "/")
	if len(parts) >= 2 {
		return parts[len(parts)-2] + "/" + parts[len(parts)-1]
	}
	return s
}

// MaxSnapshots bounds the pull-request snapshots a repository keeps from
// webhooks between two listings: a flood of signed deliveries with
// distinct numbers (each a request to the forge on the next pass) cannot
// grow it, the oldest by update time going first.
const MaxSnapshots = 256

// boundSnapshots drops the snapshots updated longest ago beyond max.
func boundSnapshots(snaps map[int]provider.PullRequest, max int) {
	for len(snaps) > max {
		oldest, first := 0, true
		for n, pr := range snaps {
			if first || pr.UpdatedAt.Before(snaps[oldest].UpdatedAt) || (pr.UpdatedAt.Equal(snaps[oldest].UpdatedAt) && n < oldest) {
				oldest, first = n, false
			}
		}
		delete(snaps, oldest)
	}
}
