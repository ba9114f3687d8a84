// Repository state: what sync remembers of one repository of the current
// config, under the engine's lock (memory.mu), which is held only to read or
// change these maps, never across a call to a forge or the API server: the
// passes over two repositories and the feedback of their pull requests wait
// for each other no longer than that.

package syncer

import (
	"sync"
	"time"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

type prKey struct {
	Repo   string
	Number int
}

// gateKey is a gate on a commit, by the gate without its app (gateKeyOf).
type gateKey struct {
	SHA, Gate string
}

// gatePass is who passed a gate on a commit: the apps whose check run of
// its name succeeded, "" for a pass read for a gate that names no app.
type gatePass map[string]bool

type statusKey struct {
	SHA, Context string
}

// repoState is what sync remembers of one repository of the current
// config. Every entry belongs to a pull request that is open or whose last
// feedback is not posted yet: a closed pull request's entries are dropped
// once its comment says so, and a repository's whole state when it leaves
// the config. mu, the engine's lock (memory.mu), guards every field but
// name.
type repoState struct {
	name string

	mu *sync.Mutex
	// snapshots are pull requests from webhooks, newer than the listing.
	snapshots map[int]provider.PullRequest
	// listing is the last listing of the open pull requests, kept for the
	// passes that follow it closely (listing.go), and sinceListing the
	// pull requests whose snapshots came after it was asked for.
	listing      *keptListing
	sinceListing map[int]bool
	// prs holds the feedback state per pull request and application.
	prs map[int]map[string]*render.PRState
	// closed are pull requests in prs that the last reconcile did not find
	// open; they are forgotten after their last feedback.
	closed map[int]bool
	// pendingSince is when the oldest unprocessed webhook arrived.
	pendingSince time.Time
	// hints are pull requests named by events another replica handed over
	// (without their payload): the reconcile reads those the listing does
	// not show as open.
	hints map[int]bool
	// life is each pull request's lifecycle state, read once from the
	// state store (statestore.go).
	life map[int]*prLife
	// commands are command comments not handled yet, per pull request,
	// and failing the failures of the oldest of them.
	commands map[int][]provider.Comment
	failing  map[int]commandFailure
	// commentHints are pull requests whose comments are listed again: a
	// command handed over without its payload, or too many at once.
	commentHints map[int]bool
	// resyncDue makes the next pass to start (takePending) list the open
	// pull requests afresh and the repository's comments since
	// commentsSince, for changes and commands whose webhook never arrived.
	resyncDue     bool
	commentsSince time.Time
	// gates are the artifact gates passed per commit, statuses the last
	// commit status posted per commit and context.
	gates    map[gateKey]gatePass
	statuses map[statusKey]provider.CommitStatus
	// newHeads are commits this process saw become a pull request's head
	// in place of one it had seen: no earlier leader can have posted a
	// status on them (a process leads once), so their first status needs
	// no read of what the forge shows (provider.NewCommits).
	newHeads map[string]bool
	// groups are the merge group events waiting for a pull request's
	// feedback, per pull request: requested (true) or destroyed, by the
	// group's commit (mergequeue.go).
	groups map[int]map[string]bool
	// trust is what was looked up of authors' permissions and of who
	// added labels (trust.go).
	trust trustCache
}

// newRepoState is a repository's state under the lock mu.
func newRepoState(name string, mu *sync.Mutex) *repoState {
	return &repoState{name: name, mu: mu, snapshots: map[int]provider.PullRequest{}, prs: map[int]map[string]*render.PRState{},
		closed: map[int]bool{}, hints: map[int]bool{}, life: map[int]*prLife{}, commands: map[int][]provider.Comment{}, failing: map[int]commandFailure{},
		commentHints: map[int]bool{}, gates: map[gateKey]gatePass{}, statuses: map[statusKey]provider.CommitStatus{},
		newHeads: map[string]bool{}, sinceListing: map[int]bool{}, groups: map[int]map[string]bool{}}
}

// prLife is one pull request's lifecycle state. state is the current one;
// saved is what the state store holds (the last one read or written).
// mu, the engine's lock (memory.mu), guards both.
type prLife struct {
	mu    *sync.Mutex
	state render.State
	saved render.State
	// shown is what this process last wrote on the pull request, for the
	// write budget (budget.go).
	shown shown
}

// commentShown is the comment's body last written and its replies to
// commands, and since when body has differed from it (now when it starts
// to).
func (l *prLife) commentShown(body string, now time.Time) (last, notes string, stale time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if body == l.shown.body {
		l.shown.bodyStale = time.Time{}
	} else if l.shown.bodyStale.IsZero() {
		l.shown.bodyStale = now
	}
	return l.shown.body, l.shown.notes, l.shown.bodyStale
}

// statusStale is since when a commit status has differed from the one
// posted (now when it starts to).
func (l *prLife) statusStale(k statusKey, now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shown.statusStale == nil {
		l.shown.statusStale = map[statusKey]time.Time{}
	}
	t, ok := l.shown.statusStale[k]
	if !ok {
		t = now
		l.shown.statusStale[k] = t
	}
	return t
}

// statusShown notes that a commit status shows what it should.
func (l *prLife) statusShown(k statusKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.shown.statusStale, k)
}

// current returns a copy of the current state.
func (l *prLife) current() render.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.Clone()
}

// lastCommand is the id of the last command handled.
func (l *prLife) lastCommand() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state.LastCommand
}

// change changes the current state.
func (l *prLife) change(f func(st *render.State)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(&l.state)
}

// lives returns the current lifecycle state of each of the pull requests
// that has one.
func (rs *repoState) lives(prs map[int]provider.PullRequest) map[int]render.State {
	rs.mu.Lock()
	ls := map[int]*prLife{}
	for n := range prs {
		if l := rs.life[n]; l != nil {
			ls[n] = l
		}
	}
	rs.mu.Unlock()
	out := make(map[int]render.State, len(ls))
	for n, l := range ls {
		out[n] = l.current()
	}
	return out
}

// setPRState changes the feedback state of one pull request and
// application.
func (rs *repoState) setPRState(number int, app string, change func(*render.PRState)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	per := rs.prs[number]
	if per == nil {
		per = map[string]*render.PRState{}
		rs.prs[number] = per
	}
	st := per[app]
	if st == nil {
		st = &render.PRState{Application: app, Repository: rs.name, Number: number}
		per[app] = st
	}
	before := st.HeadSHA
	change(st)
	if before != "" && st.HeadSHA != before {
		rs.newHeads[st.HeadSHA] = true
	}
}

// forgetCommits drops the passed gates and posted statuses of the
// repository's commits that are not the head of an open pull request: no
// gate is asked and no status posted for them any more. The caller holds
// rs.mu.
func (rs *repoState) forgetCommits(heads map[string]bool) {
	for k := range rs.gates {
		if !heads[k.SHA] {
			delete(rs.gates, k)
		}
	}
	for k := range rs.statuses {
		if !heads[k.SHA] {
			delete(rs.statuses, k)
		}
	}
	for sha := range rs.newHeads {
		if !heads[sha] {
			delete(rs.newHeads, sha)
		}
	}
}

// forgetPullRequest drops a closed pull request's state once its last
// feedback is posted, unless it was found open again meanwhile; it reports
// whether it did.
func (rs *repoState) forgetPullRequest(number int) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.closed[number] {
		return false
	}
	delete(rs.prs, number)
	delete(rs.closed, number)
	delete(rs.life, number)
	delete(rs.commands, number)
	delete(rs.failing, number)
	delete(rs.commentHints, number)
	return true
}
