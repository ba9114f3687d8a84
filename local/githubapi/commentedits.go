package githubapi

import (
	"fmt"
	"slices"
	"time"
)

// A comment's later life as a person lives it on GitHub: edited or deleted
// by its author, each with the issue_comment delivery GitHub sends (action
// edited, with the body it had under changes; action deleted, with the
// comment as it was). A client must not take either for a new command.

// CommentEditedEvent edits a comment as its author would (EditComment) and
// builds the issue_comment "edited" delivery GitHub sends for it.
func (s *Server) CommentEditedEvent(repository string, id int64, body string) (Delivery, error) {
	s.mu.Lock()
	c := s.comment(repository, id)
	if c == nil {
		s.mu.Unlock()
		return Delivery{}, fmt.Errorf("%w: comment %d on %s", ErrNoSuchPullRequest, id, repository)
	}
	from := c.Body
	s.edit(repository, id, body, c.Author)
	comment := *c
	pr := s.repo(repository).prs[comment.Number]
	if pr == nil {
		s.mu.Unlock()
		return Delivery{}, fmt.Errorf("%w: %s#%d", ErrNoSuchPullRequest, repository, comment.Number)
	}
	p := *pr
	s.mu.Unlock()
	return issueCommentDelivery(repository, p, comment, "edited", map[string]any{"changes": map[string]any{"body": map[string]any{"from": from}}})
}

// DeleteComment deletes a comment as its author would and builds the
// issue_comment "deleted" delivery GitHub sends for it. The comment is no
// longer listed, edited or reacted to (404).
func (s *Server) DeleteComment(repository string, id int64) (Delivery, error) {
	s.mu.Lock()
	r := s.repo(repository)
	var gone *Comment
	for n, cs := range r.comments {
		for i, c := range cs {
			if c.ID == id {
				gone = c
				r.comments[n] = slices.Delete(cs, i, i+1)
				break
			}
		}
	}
	if gone == nil {
		s.mu.Unlock()
		return Delivery{}, fmt.Errorf("%w: comment %d on %s", ErrNoSuchPullRequest, id, repository)
	}
	pr := r.prs[gone.Number]
	comment := *gone
	comment.UpdatedAt = s.now().UTC().Truncate(time.Second)
	if pr == nil {
		s.mu.Unlock()
		return Delivery{}, fmt.Errorf("%w: %s#%d", ErrNoSuchPullRequest, repository, comment.Number)
	}
	p := *pr
	s.mu.Unlock()
	return issueCommentDelivery(repository, p, comment, "deleted", nil)
}
