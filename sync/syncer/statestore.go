// The lifecycle state's store: where each pull request's render.State (kept,
// extended, expired commit, last command handled, deployment ids) lasts
// across restarts and leaders: a PullRequestState in the management
// namespace (sync/prstate), which only sync's identity may write. The
// pull request's comment shows the state and is never read back as it:
// anyone can write a comment, and a state taken from one would let an
// author silence maintainers' commands, keep an environment forever, expire
// a fresh one or name another deployment for sync to retire.
//
// The store is the durable part: a restarted sync or a new leader reads it
// before it writes anything for a pull request, and only what the store
// holds (prLife.saved) may hold an environment back.

package syncer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/prstate"
	"github.com/petri-dev/petri/sync/render"
)

// stateStore keeps the lifecycle state of each pull request.
type stateStore interface {
	// Load reads what is stored for a pull request.
	Load(ctx context.Context, key prKey) (storedState, error)
	// Save stores st, each application's expiry beside it (for kubectl and
	// the web page), and, unless body is empty, the pull request's
	// comment, which is rendered from st.
	Save(ctx context.Context, key prKey, body string, st render.State, expires map[string]time.Time) error
	// Forget removes what is stored for a pull request that is closed and
	// has nothing left.
	Forget(ctx context.Context, key prKey) error
	// Prune removes what is stored for every repository (by its key) that
	// keep says no to, and returns how many pull requests it forgot.
	Prune(ctx context.Context, keep func(repoKey string) bool) (int, error)
}

// storedState is what Load found.
type storedState struct {
	State render.State
	// Found is false when nothing was stored: sync's state on that pull
	// request starts afresh.
	Found bool
	// Comments are the pull request's comments when loading listed them
	// (CommentsRead): the commands among them need no listing of their
	// own. A store that does not read comments leaves both empty, and
	// they are listed through the command reader.
	Comments     []provider.Comment
	CommentsRead bool
}

// clusterStore keeps the state in PullRequestStates and writes the comment
// through the reporter of the pull request's forge.
type clusterStore struct {
	states   *prstate.Store
	reporter func(repoKey string) provider.Reporter

	// written is the spec (a petriv1.PullRequestStateSpec) last written
	// per pull request (prKey): a feedback pass that changes nothing
	// writes nothing. Each pull request's entry is read and written by
	// the one holding its lock (lockPR), or dropped by Prune for a
	// repository that left the config: the entries of different pull
	// requests at once, the case of disjoint keys sync.Map is made for.
	written sync.Map
}

func newClusterStore(states *prstate.Store, reporter func(repoKey string) provider.Reporter) *clusterStore {
	return &clusterStore{states: states, reporter: reporter}
}

// stateKey is a pull request's key in the store: the forge and path of its
// repository's key.
func stateKey(key prKey) prstate.Key {
	forge, repo := config.SplitRepositoryKey(key.Repo)
	return prstate.Key{Forge: forge, Repository: repo, Number: key.Number}
}

func (c *clusterStore) Load(ctx context.Context, key prKey) (storedState, error) {
	st, found, err := c.states.Load(ctx, stateKey(key))
	if err != nil {
		return storedState{}, err
	}
	if found {
		c.written.Store(key, prstate.ToSpec(stateKey(key), st, nil))
	}
	return storedState{State: st, Found: found}, nil
}

func (c *clusterStore) Save(ctx context.Context, key prKey, body string, st render.State, expires map[string]time.Time) error {
	spec := prstate.ToSpec(stateKey(key), st, expires)
	last, ok := c.written.Load(key)
	if !ok || !reflect.DeepEqual(last.(petriv1.PullRequestStateSpec), spec) {
		if err := c.states.Save(ctx, stateKey(key), st, expires); err != nil {
			return err
		}
		c.written.Store(key, spec)
	}
	if body == "" {
		return nil
	}
	return c.reporter(key.Repo).UpsertComment(ctx, pathOf(key.Repo), key.Number, render.CommentMarker, body)
}

func (c *clusterStore) Forget(ctx context.Context, key prKey) error {
	if err := c.states.Delete(ctx, stateKey(key)); err != nil {
		return err
	}
	c.written.Delete(key)
	return nil
}

func (c *clusterStore) Prune(ctx context.Context, keep func(repoKey string) bool) (int, error) {
	all, err := c.states.ListAll(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, st := range all {
		repo := config.RepositoryKey(st.Spec.Forge, st.Spec.Repository)
		if keep(repo) {
			continue
		}
		key := prKey{Repo: repo, Number: int(st.Spec.Number)}
		if err := c.Forget(ctx, key); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// lives are the pull requests' lifecycle states: read once from the
// store, then remembered in their repository's state; and the locks that
// serialise the work on one pull request's comment.
type lives struct {
	store  stateStore
	forges forgeSet
	memory *memory
	clock  clock.Clock
	// prLocks serialise the work on one pull request's comment (lockPR).
	prLocks [prLockStripes]sync.Mutex
}

// ensureLife returns a pull request's lifecycle state, loading it from the
// store the first time. Commands on the pull request that the state does
// not count as handled are queued for the reconcile. rs is the
// repository's state, nil for a repository that left the config. The
// caller holds the pull request's lock.
func (lv *lives) ensureLife(ctx context.Context, rs *repoState, key prKey) (*prLife, error) {
	if rs != nil {
		rs.mu.Lock()
		l := rs.life[key.Number]
		rs.mu.Unlock()
		if l != nil {
			return l, nil
		}
	}
	got, err := lv.store.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	if !got.CommentsRead {
		rf := lv.forges.of(key.Repo)
		if got.Comments, err = rf.commands.ListComments(ctx, rf.path, key.Number); err != nil {
			return nil, fmt.Errorf("list the comments of %s#%d: %w", key.Repo, key.Number, err)
		}
	}
	l := &prLife{mu: &lv.memory.mu, state: got.State, saved: got.State.Clone()}
	if rs == nil {
		// Not remembered (the repository left the config), but still
		// never written over with an empty state.
		return l, nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if have := rs.life[key.Number]; have != nil {
		return have, nil
	}
	rs.life[key.Number] = l
	now := lv.clock.Now()
	for _, c := range got.Comments {
		if !isCommand(c, got.State) {
			continue
		}
		if !got.Found && now.Sub(c.CreatedAt) > commandGrace {
			continue
		}
		rs.addCommand(c)
	}
	return l, nil
}

// isCommand tells whether a comment is a command that a state does not
// count as handled yet (and not a comment carrying sync's marker: sync's
// own, or a copy of it).
func isCommand(c provider.Comment, st render.State) bool {
	return c.ID > st.LastCommand && render.HasCommand(c.Body) && !strings.Contains(c.Body, render.CommentMarker)
}

// prLockStripes is the number of locks that serialise the work on one
// pull request's comment (reconcile and feedback).
const prLockStripes = 64

// lockPR serialises everything that reads and then writes one pull
// request's comment; it returns the unlock.
func (lv *lives) lockPR(key prKey) func() {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s#%d", key.Repo, key.Number)
	m := &lv.prLocks[h.Sum32()%prLockStripes]
	m.Lock()
	return m.Unlock
}

// interest returns, in order, the open pull requests that an application
// matches or that have an environment of it.
func interest(apps []*config.Application, openBy map[int]provider.PullRequest, envs map[string]map[int]*petriv1.EphemeralEnvironment) []int {
	var out []int
	for n, pr := range openBy {
		for _, app := range apps {
			if envs[app.Name][n] != nil || app.Matches(render.View(pr)).Match {
				out = append(out, n)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// readLives, the last step of a repository's observe, finds the pull
// requests of interest (interest) and reads the lifecycle state of each
// from the store (once; then it is remembered). A pull request whose state
// could not be read is unknown for this pass; a rate limit stops it.
func (rc *repoController) readLives(ctx context.Context, o *observation) error {
	o.interest = interest(o.apps, o.openBy, o.envs)
	var rle *provider.RateLimitError
	for _, n := range o.interest {
		unlock := rc.lives.lockPR(prKey{o.repo, n})
		_, err := rc.lives.ensureLife(ctx, o.rs, prKey{o.repo, n})
		unlock()
		if err != nil {
			if errors.As(err, &rle) {
				return err
			}
			o.unknown[n] = true
			o.errs = append(o.errs, fmt.Errorf("pull request %s#%d: %w", o.repo, n, err))
		}
	}
	return nil
}
