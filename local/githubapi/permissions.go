package githubapi

import (
	"net/http"
	"strings"
)

// SetPermission gives a user a role on a repository: admin, maintain,
// write, triage, read or none. A user without one reads as read, as on a
// public repository.
func (s *Server) SetPermission(repository, user, role string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.moreState()
	key := strings.ToLower(repository)
	if m.permissions[key] == nil {
		m.permissions[key] = map[string]string{}
	}
	m.permissions[key][strings.ToLower(user)] = role
}

// DeleteUser deletes a user's account: what it wrote stays, and its
// permission is asked in vain (404), as GitHub answers for a login that is
// no user's.
func (s *Server) DeleteUser(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moreState().deleted[strings.ToLower(user)] = true
}

// permission answers GET .../collaborators/{user}/permission as GitHub
// does: permission is admin, write, read or none (maintain reads as write,
// triage as read), role_name the role itself; 404 for a deleted user.
func (s *Server) permission(w http.ResponseWriter, r *http.Request, repository, user string) {
	s.mu.Lock()
	m := s.moreState()
	role, deleted := m.permissions[strings.ToLower(repository)][strings.ToLower(user)], m.deleted[strings.ToLower(user)]
	s.mu.Unlock()
	if deleted {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if role == "" {
		role = "read"
	}
	perm := map[string]string{"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read"}[role]
	if perm == "" {
		perm = "none"
	}
	s.writeCached(w, r, map[string]any{"permission": perm, "role_name": role, "user": map[string]any{"login": user, "type": "User"}})
}
