// Merge queue: where petri/<app> is a required check and a branch merges
// through GitHub's merge queue, the queue waits for that status on each
// merge group's commit. A merge_group webhook (checks_requested,
// destroyed) is kept per pull request in the repository's state, as the
// leader's handleEvent keeps it or as a follower's refresh mark (mg.<N>.<sha>,
// mgd.<N>.<sha>) hands it over, and the pull request's feedback acts on it:
// an application in mergeQueue success mode gets a success on the group at
// once; one in environment mode remembers the group in the pull request's
// state (render.State.MergeGroups) and posts on it what its environment
// says at the pull request's head: success when Ready there, pending while
// it deploys, failure or error when it failed. The head is the commit the
// queue took: a push to a queued pull request takes it out of the queue (a
// destroyed group). A group is forgotten once it was destroyed or a final
// status was posted on it; a closed pull request keeps its groups until
// then. A leader that stops records the events it has not acted on as
// marks for the next one (handOverGroups): GitHub lists no merge groups.

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

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/webhook"
)

// Refresh marks of merge groups, followed by <number>.<sha>.
const (
	markMergeGroup          = "mg."
	markMergeGroupDestroyed = "mgd."
)

// maxPendingGroups bounds the merge groups waiting for one pull request's
// feedback: GitHub's queue holds a pull request in one group at a time.
const maxPendingGroups = 2 * render.MaxMergeGroups

// mergeGroupMark is the refresh mark of a merge_group event.
func mergeGroupMark(g *webhook.MergeGroup) string {
	prefix := markMergeGroup
	if g.Destroyed {
		prefix = markMergeGroupDestroyed
	}
	return prefix + strconv.Itoa(g.Number) + "." + g.HeadSHA
}

// parseMergeGroupMark reads a mark of mergeGroupMark.
func parseMergeGroupMark(name string) (number int, sha string, requested, ok bool) {
	rest, destroyed := strings.CutPrefix(name, markMergeGroupDestroyed)
	if !destroyed {
		if rest, ok = strings.CutPrefix(name, markMergeGroup); !ok {
			return 0, "", false, false
		}
	}
	num, sha, ok := strings.Cut(rest, ".")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n <= 0 || len(sha) != 40 {
		return 0, "", false, false
	}
	return n, sha, !destroyed, true
}

// noteGroup keeps a merge group's event for the pull request's feedback:
// requested (checks_requested) or not (destroyed, which no later request
// of the same commit undoes). The caller holds rs.mu.
func (rs *repoState) noteGroup(number int, sha string, requested bool) {
	g := rs.groups[number]
	if g == nil {
		g = map[string]bool{}
		rs.groups[number] = g
	}
	if was, ok := g[sha]; ok && !was {
		return
	}
	if _, ok := g[sha]; !ok && len(g) >= maxPendingGroups {
		return
	}
	g[sha] = requested
}

// takeGroupMarks keeps the merge groups among a Repository's marks and
// returns the pull requests they belong to.
func (rs *repoState) takeGroupMarks(taken map[string]time.Time) []int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var numbers []int
	for name := range taken {
		if n, sha, requested, ok := parseMergeGroupMark(name); ok {
			rs.noteGroup(n, sha, requested)
			numbers = append(numbers, n)
		}
	}
	return numbers
}

// pendingGroups copies the merge group events waiting for a pull request.
func (rs *repoState) pendingGroups(number int) map[string]bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return maps.Clone(rs.groups[number])
}

// doneGroups forgets the events of done, unless one changed meanwhile.
func (rs *repoState) doneGroups(number int, done map[string]bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	g := rs.groups[number]
	for sha, requested := range done {
		if cur, ok := g[sha]; ok && cur == requested {
			delete(g, sha)
		}
	}
	if len(g) == 0 {
		delete(rs.groups, number)
	}
}

// mergeQueue posts on the merge groups of pull requests, and hands the
// groups it did not act on to the next leader. post is the feedback's
// commit status (feedback.go).
type mergeQueue struct {
	memory  *memory
	refresh *refresher
	clock   clock.Clock
	log     logr.Logger
	post    func(ctx context.Context, key prKey, rs *repoState, sha string, cs provider.CommitStatus) error
}

// mergeQueueModes are the mergeQueue modes of the repository's
// applications that post on merge groups, by application.
func (q *mergeQueue) mergeQueueModes(repo string) map[string]string {
	cfg := q.memory.config()
	out := map[string]string{}
	if cfg == nil {
		return out
	}
	for _, a := range cfg.Applications {
		if a.RepositoryKey() == repo && a.ForgeName() == config.ForgeGitHub && a.MergeQueueMode() != config.MergeQueueOff {
			out[a.Name] = a.MergeQueueMode()
		}
	}
	return out
}

// noPreviewStatus is the success an application posts on a merge group
// where it waits for nothing: success mode, or no environment of the pull
// request to wait for.
func noPreviewStatus(app string, number int, mode string) provider.CommitStatus {
	desc := "Merge queue: no preview needed"
	if mode == config.MergeQueueEnvironment {
		desc = fmt.Sprintf("Merge queue: #%d has no environment of %s to wait for", number, app)
	}
	return provider.CommitStatus{Context: render.StatusContext(app), State: "success", Description: desc}
}

// groupStatus is what an application in environment mode posts on a merge
// group of pull request number: its status at the pull request's head.
func groupStatus(app string, number int, st render.PRState, found bool) provider.CommitStatus {
	if !found || st.Env == nil && st.Waiting == "" && st.Error == "" && !st.Expired() {
		return noPreviewStatus(app, number, config.MergeQueueEnvironment)
	}
	cs, ok := render.CommitStatus(st)
	if !ok || st.HeadSHA == "" {
		return provider.CommitStatus{Context: render.StatusContext(app), State: "pending", Description: fmt.Sprintf("Merge queue: waiting for the environment of #%d", number)}
	}
	cs.Description = fmt.Sprintf("Merge queue, #%d at %s: %s", number, shortSHA(st.HeadSHA), cs.Description)
	return cs
}

// mergeGroupFeedback acts on a pull request's merge groups (see the top
// of this file); states are its applications' feedback states, life its
// lifecycle state (nil when it has none: nothing to wait for), and behind
// says the cache does not show sync's last write yet, so nothing is
// posted from it.
func (q *mergeQueue) mergeGroupFeedback(ctx context.Context, key prKey, rs *repoState, states map[string]render.PRState, life *prLife, behind bool) error {
	if rs == nil {
		return nil
	}
	modes := q.mergeQueueModes(key.Repo)
	pending := rs.pendingGroups(key.Number)
	var errs []error
	var waiting []string
	for _, app := range slices.Sorted(maps.Keys(modes)) {
		_, found := states[app]
		if modes[app] == config.MergeQueueEnvironment && found && life != nil {
			waiting = append(waiting, app)
			continue
		}
		for _, sha := range slices.Sorted(maps.Keys(pending)) {
			if pending[sha] {
				errs = append(errs, q.post(ctx, key, rs, sha, noPreviewStatus(app, key.Number, modes[app])))
			}
		}
	}
	if life != nil {
		life.change(func(st *render.State) {
			for sha, requested := range pending {
				if !requested {
					st.DropMergeGroup(sha)
				} else if len(waiting) > 0 {
					st.AddMergeGroup(sha)
				}
			}
		})
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	rs.doneGroups(key.Number, pending)
	if behind || life == nil {
		return nil
	}
	for _, sha := range life.current().MergeGroups {
		final := true
		for _, app := range waiting {
			cs := groupStatus(app, key.Number, states[app], true)
			if err := q.post(ctx, key, rs, sha, cs); err != nil {
				errs = append(errs, err)
				final = false
			} else if cs.State == "pending" {
				final = false
			}
		}
		if final {
			// Posted for good: a failure takes the pull request out of
			// the queue, a success lets it merge.
			life.change(func(st *render.State) { st.DropMergeGroup(sha) })
		}
	}
	return errors.Join(errs...)
}

// handOverGroups records, as refresh marks for the next leader, the merge
// group events this replica took and has not acted on when its leadership
// ends (the feedback workers have stopped): GitHub lists no merge groups,
// so no resync would find them again. A group already acted on and marked
// again costs the next leader a read of the status it shows, no post.
func (q *mergeQueue) handOverGroups(ctx context.Context) {
	if q.refresh == nil {
		return
	}
	pending := marks{}
	now := q.clock.Now()
	for _, rs := range q.memory.repoStates() {
		rs.mu.Lock()
		for n, g := range rs.groups {
			for sha, requested := range g {
				pending.add(rs.name, mergeGroupMark(&webhook.MergeGroup{Number: n, HeadSHA: sha, Destroyed: !requested}), now)
			}
		}
		rs.mu.Unlock()
	}
	if len(pending) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markLastTry)
	defer cancel()
	if err := q.refresh.record(lctx, pending); err != nil {
		q.log.Error(err, "Handing the merge groups not acted on to the next leader failed; the merge queue's timeout removes their pull requests", "repositories", len(pending))
	}
}
