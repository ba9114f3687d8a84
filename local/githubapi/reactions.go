package githubapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// Reaction is one reaction on an issue comment.
type Reaction struct {
	ID      int64
	Content string
	User    string
}

// Reactions returns the reactions on a comment, oldest first.
func (s *Server) Reactions(repository string, commentID int64) []Reaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.moreState().reactions[strings.ToLower(repository)][commentID])
}

var reactionContents = []string{"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}

// react answers POST .../issues/comments/{id}/reactions: 201 with a new
// reaction, 200 with the one the user already left.
func (s *Server) react(w http.ResponseWriter, r *http.Request, repository string, id int64) {
	var in struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !slices.Contains(reactionContents, in.Content) {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	s.mu.Lock()
	if s.comment(repository, id) == nil {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	m := s.moreState()
	key := strings.ToLower(repository)
	if m.reactions[key] == nil {
		m.reactions[key] = map[int64][]Reaction{}
	}
	for _, re := range m.reactions[key][id] {
		if re.Content == in.Content && re.User == apiUser {
			s.mu.Unlock()
			s.charge(w)
			writeJSON(w, http.StatusOK, reactionJSON(re))
			return
		}
	}
	s.nextID++
	re := Reaction{ID: s.nextID, Content: in.Content, User: apiUser}
	m.reactions[key][id] = append(m.reactions[key][id], re)
	s.mu.Unlock()
	s.charge(w)
	writeJSON(w, http.StatusCreated, reactionJSON(re))
}

func reactionJSON(re Reaction) map[string]any {
	return map[string]any{"id": re.ID, "content": re.Content, "user": map[string]any{"login": re.User, "type": "Bot"}}
}
