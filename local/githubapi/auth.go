package githubapi

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// InstallationTokensIssued counts the installation tokens issued so far.
func (s *Server) InstallationTokensIssued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}

func (s *Server) authorized(r *http.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tokens) == 0 && s.opts.AppKey == nil {
		return true
	}
	auth := r.Header.Get("Authorization")
	var tok string
	switch {
	case strings.HasPrefix(auth, "Bearer "):
		tok = strings.TrimPrefix(auth, "Bearer ")
	case strings.HasPrefix(auth, "token "):
		tok = strings.TrimPrefix(auth, "token ")
	default:
		return false
	}
	exp, ok := s.tokens[tok]
	return ok && (exp.IsZero() || s.now().Before(exp))
}

func (s *Server) issueInstallationToken(w http.ResponseWriter, r *http.Request) {
	if s.opts.AppKey == nil || !verifyAppJWT(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), s.opts.AppID, s.opts.AppKey, s.now()) {
		writeError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	ttl := s.opts.InstallationTokenTTL
	if ttl == 0 {
		ttl = time.Hour
	}
	s.mu.Lock()
	s.issued++
	tok := fmt.Sprintf("ghs_installation_%d_%d", s.issued, s.now().UnixNano())
	exp := s.now().Add(ttl)
	s.tokens[tok] = exp
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"token": tok, "expires_at": exp.UTC().Format(time.RFC3339)})
}

// verifyAppJWT checks an RS256 JWT issued by the GitHub App.
func verifyAppJWT(token string, appID int64, key *rsa.PublicKey, now time.Time) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig) != nil {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var claims struct {
		Iss any   `json:"iss"`
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return false
	}
	return fmt.Sprint(claims.Iss) == strconv.FormatInt(appID, 10) && now.Unix() < claims.Exp
}
