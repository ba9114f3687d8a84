package forge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/petri-dev/petri/sync/provider"
)

// Login is an identity asked of the forge once: a failed question is asked
// again on the next call.
type Login struct {
	mu    sync.Mutex
	login string
}

// Get is the login, asked with ask the first time.
func (l *Login) Get(ctx context.Context, ask func(context.Context) (string, error)) (string, error) {
	l.mu.Lock()
	login := l.login
	l.mu.Unlock()
	if login != "" {
		return login, nil
	}
	login, err := ask(ctx)
	if err != nil {
		return "", err
	}
	l.Set(login)
	return login, nil
}

// Set gives the login, which is then never asked.
func (l *Login) Set(login string) {
	l.mu.Lock()
	l.login = login
	l.mu.Unlock()
}

// IsOwn tells whether a comment is sync's: it carries marker and self
// wrote it. Anyone may paste the marker into a comment of their own, and
// sync never edits that.
func IsOwn(author, body, self, marker string) bool {
	return strings.Contains(body, marker) && strings.EqualFold(author, self)
}

// CommentRef is the id and body of sync's comment on a pull request.
type CommentRef struct {
	ID   int64
	Body string
}

// CommentCalls are one forge's calls for Comments.Upsert on one pull
// request. Each returns its errors as the provider reports them.
type CommentCalls struct {
	// Find lists the pull request's comments and returns sync's own (see
	// IsOwn), false when there is none.
	Find func(ctx context.Context) (CommentRef, bool, error)
	// Before, when set, is asked once before editing or creating.
	Before func() error
	// Edit replaces the body of comment id and returns the edited
	// comment's id; its error wraps provider.ErrNotFound when the comment
	// is gone.
	Edit func(ctx context.Context, id int64, body string) (int64, error)
	// Create writes a new comment and returns its id.
	Create func(ctx context.Context, body string) (int64, error)
}

// Comments remembers sync's comment on each pull request, keyed by the
// repository (in any case) and the number.
type Comments struct {
	mu   sync.Mutex
	refs map[string]CommentRef
}

// NewComments remembers nothing yet.
func NewComments() *Comments {
	return &Comments{refs: map[string]CommentRef{}}
}

// Upsert keeps exactly one comment of sync's with body on the pull
// request: found once with calls.Find, then edited in place, and written
// again should someone have deleted it. An unchanged body costs no call
// once the comment is known.
func (m *Comments) Upsert(ctx context.Context, repository string, number int, body string, calls CommentCalls) error {
	key := commentKey(repository, number)
	m.mu.Lock()
	ref, known := m.refs[key]
	m.mu.Unlock()
	if !known {
		var err error
		if ref, known, err = calls.Find(ctx); err != nil {
			return err
		}
	}
	if known && ref.Body == body {
		m.remember(key, ref)
		return nil
	}
	if calls.Before != nil {
		if err := calls.Before(); err != nil {
			return err
		}
	}
	if known {
		id, err := calls.Edit(ctx, ref.ID, body)
		if err == nil {
			m.remember(key, CommentRef{ID: id, Body: body})
			return nil
		}
		if !errors.Is(err, provider.ErrNotFound) {
			return err
		}
		// Someone deleted our comment: write a new one.
	}
	id, err := calls.Create(ctx, body)
	if err != nil {
		return err
	}
	m.remember(key, CommentRef{ID: id, Body: body})
	return nil
}

func (m *Comments) remember(key string, ref CommentRef) {
	m.mu.Lock()
	m.refs[key] = ref
	m.mu.Unlock()
}

func commentKey(repository string, number int) string {
	return fmt.Sprintf("%s#%d", strings.ToLower(repository), number)
}

// ForgetPullRequest forgets the comment of a pull request: it is found
// again by listing, should it be needed.
func (m *Comments) ForgetPullRequest(repository string, number int) {
	m.mu.Lock()
	delete(m.refs, commentKey(repository, number))
	m.mu.Unlock()
}

// ForgetRepository forgets the comments of every pull request of a
// repository.
func (m *Comments) ForgetRepository(repository string) {
	prefix := strings.ToLower(repository) + "#"
	m.mu.Lock()
	for k := range m.refs {
		if strings.HasPrefix(k, prefix) {
			delete(m.refs, k)
		}
	}
	m.mu.Unlock()
}
