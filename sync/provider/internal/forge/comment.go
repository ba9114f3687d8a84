package forge

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/petri-dev/petri/sync/provider"
)

// Login is an identity asked of the forge once per credential: a failed
// question is asked again on the next call, and so is one whose answer was
// given for another token (a token file replaced by a new project access
// token is a new bot user, whose comments are not the old one's).
type Login struct {
	mu    sync.Mutex
	login string
	// of is the fingerprint of the credential login was asked with.
	of [sha256.Size]byte
	// Credential, when set, is the credential requests are sent with now;
	// only a fingerprint of it is kept.
	Credential func() (string, error)
}

// Get is the login, asked with ask the first time and again once the
// credential changed.
func (l *Login) Get(ctx context.Context, ask func(context.Context) (string, error)) (string, error) {
	var now [sha256.Size]byte
	if l.Credential != nil {
		c, err := l.Credential()
		if err != nil {
			return "", err
		}
		now = sha256.Sum256([]byte(c))
	}
	l.mu.Lock()
	login := l.login
	if l.of != now {
		login = ""
	}
	l.mu.Unlock()
	if login != "" {
		return login, nil
	}
	login, err := ask(ctx)
	if err != nil {
		return "", err
	}
	l.mu.Lock()
	l.login, l.of = login, now
	l.mu.Unlock()
	return login, nil
}

// Set gives the login, which is then never asked while the credential
// stays the same.
func (l *Login) Set(login string) {
	var now [sha256.Size]byte
	if l.Credential != nil {
		if c, err := l.Credential(); err == nil {
			now = sha256.Sum256([]byte(c))
		}
	}
	l.mu.Lock()
	l.login, l.of = login, now
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
	// self is the login it was found or written as.
	self string
}

// CommentCalls are one forge's calls for Comments.Upsert on one pull
// request. Each returns its errors as the provider reports them.
type CommentCalls struct {
	// Self is the login sync writes as now: a comment remembered as
	// another login's (written with a token since replaced by another
	// user's) is not one sync can edit, and is found again.
	Self string
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
	if known && ref.self != calls.Self {
		known = false
	}
	if !known {
		var err error
		if ref, known, err = calls.Find(ctx); err != nil {
			return err
		}
	}
	ref.self = calls.Self
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
			m.remember(key, CommentRef{ID: id, Body: body, self: calls.Self})
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
	m.remember(key, CommentRef{ID: id, Body: body, self: calls.Self})
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
