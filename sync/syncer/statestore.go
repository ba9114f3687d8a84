// The lifecycle state's store: where each pull request's render.State (kept,
// extended, expired commit, last command handled, deployment ids) lasts
// across restarts and leaders. Today it is the hidden line in sync's own
// comment (commentStore); the pass and the feedback know only the seam.
//
// The store is the durable part: a restarted sync or a new leader reads it
// before it writes anything for a pull request, and only what the store
// holds (prLife.saved) may hold an environment back.

package syncer

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/render"
)

// stateStore keeps the lifecycle state of each pull request.
type stateStore interface {
	// Load reads what is stored for a pull request.
	Load(ctx context.Context, key prKey) (storedState, error)
	// Save stores st, together with the pull request's comment, body,
	// which is rendered with st.
	Save(ctx context.Context, key prKey, body string, st render.State) error
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

// commentStore keeps the state in the hidden line of sync's comment on the
// pull request: read from the first comment carrying the marker, written
// with the comment.
type commentStore struct {
	comments provider.CommandReader
	reporter provider.Reporter
}

func (c commentStore) Load(ctx context.Context, key prKey) (storedState, error) {
	cs, err := c.comments.ListComments(ctx, key.Repo, key.Number)
	if err != nil {
		return storedState{}, fmt.Errorf("read the state in sync's comment: %w", err)
	}
	out := storedState{Comments: cs, CommentsRead: true}
	for _, cm := range cs {
		if strings.Contains(cm.Body, render.CommentMarker) {
			out.State, out.Found = render.ParseState(cm.Body)
			break
		}
	}
	return out, nil
}

// Save writes the comment; the body carries st in its hidden line.
func (c commentStore) Save(ctx context.Context, key prKey, body string, _ render.State) error {
	return c.reporter.UpsertComment(ctx, key.Repo, key.Number, render.CommentMarker, body)
}

// ensureLife returns a pull request's lifecycle state, loading it from the
// store the first time. Commands on the pull request that the state does
// not count as handled are queued for the reconcile. rs is the
// repository's state, nil where the caller has none: then it is looked up
// in the config. The caller holds the pull request's lock.
func (s *Syncer) ensureLife(ctx context.Context, rs *repoState, key prKey) (*prLife, error) {
	if rs != nil {
		rs.mu.Lock()
		l := rs.life[key.Number]
		rs.mu.Unlock()
		if l != nil {
			return l, nil
		}
	}
	got, err := s.store.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	if !got.CommentsRead {
		if got.Comments, err = s.commands.ListComments(ctx, key.Repo, key.Number); err != nil {
			return nil, fmt.Errorf("list the comments of %s#%d: %w", key.Repo, key.Number, err)
		}
	}
	l := &prLife{state: got.State, saved: got.State.Clone()}
	if rs == nil {
		rs = s.configuredRepo(key.Repo)
	}
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
	now := s.clock.Now()
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
// count as handled yet (and not sync's own comment).
func isCommand(c provider.Comment, st render.State) bool {
	return c.ID > st.LastCommand && render.HasCommand(c.Body) && !strings.Contains(c.Body, render.CommentMarker)
}

// prLockStripes is the number of locks that serialise the work on one
// pull request's comment (reconcile and feedback).
const prLockStripes = 64

// lockPR serialises everything that reads and then writes one pull
// request's comment; it returns the unlock.
func (s *Syncer) lockPR(key prKey) func() {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s#%d", key.Repo, key.Number)
	m := &s.prLocks[h.Sum32()%prLockStripes]
	m.Lock()
	return m.Unlock
}
