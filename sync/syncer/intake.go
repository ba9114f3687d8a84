// Intake: accepted webhooks are recorded (pull request snapshots, passed
// gates) before their repository is queued; a replica that does not lead
// records them on the repository's Repository instead (refresh.go). The
// config repository's loop and the periodic resync are configloop.go's.

package syncer

import (
	"context"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/webhook"
)

// intake takes the accepted webhooks. lead says whether this replica
// acts; refresh (nil without leader election) is where a replica that
// does not records them for the leader.
type intake struct {
	events           chan webhook.Event
	memory           *memory
	lead             *leadership
	refresh          *refresher
	queue            workqueue.TypedRateLimitingInterface[string]
	feedback         workqueue.TypedRateLimitingInterface[prKey]
	triggerConfig    func()
	configRepository string
	clock            clock.Clock
	log              logr.Logger
}

// eventLoop takes the accepted webhooks: the replica that acts keeps each
// in its memory and queues its repository (handleEvent); another records
// them on the Repositories for the leader, in one write per repository for
// what waits, and retries with back-off while the API server refuses.
// When ctx ends, what was not recorded yet and the events still queued are
// recorded, for the leader or the next one.
func (in *intake) eventLoop(ctx context.Context) {
	pending := marks{}
	defer in.lastMarks(ctx, pending)
	var retry <-chan time.Time
	backoff := markBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry:
			retry = nil
		case ev := <-in.events:
			in.take(ev, pending)
			// What else waits goes into the same write.
			for drained := false; !drained; {
				select {
				case ev := <-in.events:
					in.take(ev, pending)
				default:
					drained = true
				}
			}
		}
		if len(pending) == 0 || retry != nil {
			continue
		}
		if err := in.refresh.record(ctx, pending); err != nil {
			if ctx.Err() != nil {
				return
			}
			in.log.Error(err, "Recording webhooks for the leader failed; retrying", "repositories", len(pending), "retryIn", backoff)
			retry = in.clock.After(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = markBackoff
	}
}

// take acts on a webhook when this replica acts (always, without leader
// election), and otherwise adds its mark to pending.
func (in *intake) take(ev webhook.Event, pending marks) {
	if in.refresh == nil || in.lead.Leader() {
		in.handleEvent(ev)
		return
	}
	if key, name, ok := in.markOf(ev); ok {
		pending.add(key, name, ev.Received)
	}
}

func (in *intake) handleEvent(ev webhook.Event) {
	key := config.RepositoryKey(ev.Forge, ev.Repository)
	if ev.Type == "push" && in.isConfigRepo(ev) {
		in.log.Info("Config repository pushed; fetching", "ref", ev.Ref)
		in.triggerConfig()
		return
	}
	r := in.memory.configuredRepo(key)
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
		in.feedback.Add(prKey{key, ev.MergeGroup.Number})
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
	in.queue.Add(key)
}

func (in *intake) isConfigRepo(ev webhook.Event) bool {
	want := normalizeRepo(in.configRepository)
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
