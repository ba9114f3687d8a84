package githubapi

import (
	"net/http"
	"strings"
)

// Who the server's credentials are, as GitHub answers it: GET /user for a
// token (its user), GET /app with the App's JWT (the App, whose comments
// are signed by "<slug>[bot]"). sync asks before it edits a comment, so it
// edits only its own.

// AppSlug is the App's slug; its bot's login is apiUser.
const AppSlug = "petri"

// APIUser is the login the server's credentials act as (the token's user,
// the App's bot): whatever sync writes, it writes as APIUser, so a test
// tells sync's comments, edits and statuses from everyone else's by it.
const APIUser = apiUser

// currentUser answers GET /user: the token's user.
func (s *Server) currentUser(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{"login": apiUser, "id": 1, "type": userType(apiUser)})
}

// app answers GET /app to the App's JWT.
func (s *Server) app(w http.ResponseWriter, r *http.Request) {
	if s.opts.AppKey == nil || !verifyAppJWT(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), s.opts.AppID, s.opts.AppKey, s.now()) {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": s.opts.AppID, "slug": AppSlug, "name": "Petri"})
}

// userType is how GitHub types a login: bots end in [bot].
func userType(login string) string {
	if strings.HasSuffix(login, "[bot]") {
		return "Bot"
	}
	return "User"
}
