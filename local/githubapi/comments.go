package githubapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"
)

// Comment is one issue comment.
type Comment struct {
	ID     int64
	Body   string
	Author string
	Edits  int
	// Editors are the logins that made each edit, in order: the author's
	// own (EditComment) or the token's user's (PATCH through the API).
	Editors []string
	// Number is the pull request the comment is on.
	Number    int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Comments returns the comments of a pull request.
func (s *Server) Comments(repository string, number int) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range s.repo(repository).comments[number] {
		cc := *c
		cc.Editors = slices.Clone(c.Editors)
		out = append(out, cc)
	}
	return out
}

// AddComment adds a comment as a person would and returns it.
func (s *Server) AddComment(repository string, number int, author, body string) Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	r := s.repo(repository)
	now := s.now().UTC().Truncate(time.Second)
	c := &Comment{ID: s.nextID, Body: body, Author: author, Number: number, CreatedAt: now, UpdatedAt: now}
	r.comments[number] = append(r.comments[number], c)
	return *c
}

func commentJSON(repository string, c Comment) map[string]any {
	return map[string]any{
		"id": c.ID, "body": c.Body, "user": map[string]any{"login": c.Author, "type": userType(c.Author)},
		"url":                fmt.Sprintf("https://api.github.com/repos/%s/issues/comments/%d", repository, c.ID),
		"html_url":           fmt.Sprintf("https://github.com/%s/pull/%d#issuecomment-%d", repository, c.Number, c.ID),
		"issue_url":          fmt.Sprintf("https://api.github.com/repos/%s/issues/%d", repository, c.Number),
		"created_at":         c.CreatedAt.UTC().Format(time.RFC3339),
		"updated_at":         c.UpdatedAt.UTC().Format(time.RFC3339),
		"author_association": "NONE",
	}
}

// EditComment changes a comment's body as its author would.
func (s *Server) EditComment(repository string, id int64, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.comment(repository, id); c != nil {
		s.edit(repository, id, body, c.Author)
	}
}

// since reads the since parameter; zero when absent.
func since(r *http.Request) (time.Time, bool) {
	v := r.URL.Query().Get("since")
	if v == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// listComments answers GET /repos/{o}/{r}/issues/{n}/comments: oldest
// first, only those updated at or after since.
func (s *Server) listComments(w http.ResponseWriter, r *http.Request, repository string, number int) {
	from, ok := since(r)
	if !ok {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	s.mu.Lock()
	out := []any{}
	for _, c := range s.repo(repository).comments[number] {
		if !c.UpdatedAt.Before(from) {
			out = append(out, commentJSON(repository, *c))
		}
	}
	s.mu.Unlock()
	s.paginate(w, r, out)
}

// listRepositoryComments answers GET /repos/{o}/{r}/issues/comments: every
// comment of the repository updated at or after since, sorted by created
// (default) or updated, ascending (default) or descending.
func (s *Server) listRepositoryComments(w http.ResponseWriter, r *http.Request, repository string) {
	from, ok := since(r)
	q := r.URL.Query()
	sortBy, dir := q.Get("sort"), q.Get("direction")
	if !ok || (sortBy != "" && sortBy != "created" && sortBy != "updated") || (dir != "" && dir != "asc" && dir != "desc") {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	s.mu.Lock()
	var cs []Comment
	for _, list := range s.repo(repository).comments {
		for _, c := range list {
			if !c.UpdatedAt.Before(from) {
				cs = append(cs, *c)
			}
		}
	}
	s.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if dir == "desc" {
			a, b = b, a
		}
		if sortBy == "updated" && !a.UpdatedAt.Equal(b.UpdatedAt) {
			return a.UpdatedAt.Before(b.UpdatedAt)
		}
		return a.ID < b.ID
	})
	out := make([]any, 0, len(cs))
	for _, c := range cs {
		out = append(out, commentJSON(repository, c))
	}
	s.paginate(w, r, out)
}

// commentBody reads the body of a comment's POST or PATCH; false (and 422
// answered) when it cannot be read.
func commentBody(w http.ResponseWriter, r *http.Request) (string, bool) {
	var in struct {
		Body string `json:"body"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return "", false
	}
	return in.Body, true
}

// createComment answers POST .../issues/{n}/comments: the comment is the
// token's user's (apiUser).
func (s *Server) createComment(w http.ResponseWriter, r *http.Request, repository string, n int) {
	body, ok := commentBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	s.nextID++
	now := s.now().UTC().Truncate(time.Second)
	c := &Comment{ID: s.nextID, Body: body, Author: apiUser, Number: n, CreatedAt: now, UpdatedAt: now}
	rp := s.repo(repository)
	rp.comments[n] = append(rp.comments[n], c)
	out := commentJSON(repository, *c)
	s.mu.Unlock()
	s.charge(w)
	writeJSON(w, http.StatusCreated, out)
}

// editComment answers PATCH .../issues/comments/{id}.
func (s *Server) editComment(w http.ResponseWriter, r *http.Request, repository string, id int64) {
	body, ok := commentBody(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	found := s.edit(repository, id, body, apiUser)
	var out map[string]any
	if found != nil {
		out = commentJSON(repository, *found)
	}
	s.mu.Unlock()
	if found == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	s.charge(w)
	writeJSON(w, http.StatusOK, out)
}

// comment returns the comment of that id in a repository, or nil; s.mu is
// held.
func (s *Server) comment(repository string, id int64) *Comment {
	var found *Comment
	for _, cs := range s.repo(repository).comments {
		for _, c := range cs {
			if c.ID == id {
				found = c
			}
		}
	}
	return found
}

// edit changes a comment's body as editor, counting the edit, and returns
// the comment (nil when there is none); s.mu is held.
func (s *Server) edit(repository string, id int64, body, editor string) *Comment {
	c := s.comment(repository, id)
	if c != nil {
		c.Body = body
		c.Edits++
		c.Editors = append(c.Editors, editor)
		c.UpdatedAt = s.now().UTC().Truncate(time.Second)
	}
	return c
}
