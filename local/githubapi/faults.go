package githubapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Fault makes the server misbehave for the requests it matches.
type Fault struct {
	// Match selects the requests; all requests when nil.
	Match func(*http.Request) bool
	// Status answers with this HTTP status and a GitHub-style error body.
	Status int
	// Delay holds the answer back this long (or until the client gives up),
	// to simulate a timeout.
	Delay time.Duration
	// EmptyList answers pull request listings with an empty list; other
	// requests get Status when it is set.
	EmptyList bool
	// RateLimited answers 403 with X-RateLimit-Remaining: 0, reset after
	// RetryAfter.
	RateLimited bool
	// SecondaryRateLimited answers 403 with a Retry-After header.
	SecondaryRateLimited bool
	// RetryAfter is the wait announced by the rate-limit answers.
	RetryAfter time.Duration
}

// SetFault makes the server misbehave; nil restores normal service.
func (s *Server) SetFault(f *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// applyFault makes the request misbehave as the fault set by SetFault says,
// when it matches: answered reports that the fault answered it (or gave
// up on it) and nothing more is to be written; emptyList that pull request
// listings answer an empty list.
func (s *Server) applyFault(w http.ResponseWriter, r *http.Request, path string) (emptyList, answered bool) {
	s.mu.Lock()
	fault := s.fault
	s.mu.Unlock()
	if fault == nil || (fault.Match != nil && !fault.Match(r)) {
		return false, false
	}
	if fault.Delay > 0 {
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			return false, true
		}
	}
	switch {
	case fault.RateLimited:
		s.mu.Lock()
		reset := s.now().Add(fault.RetryAfter)
		s.mu.Unlock()
		h := w.Header()
		h.Set("X-RateLimit-Limit", "5000")
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		writeError(w, http.StatusForbidden, "API rate limit exceeded")
		return false, true
	case fault.SecondaryRateLimited:
		w.Header().Set("Retry-After", strconv.Itoa(int(fault.RetryAfter.Seconds())))
		writeSecondaryRateLimit(w)
		return false, true
	case fault.EmptyList && r.Method == http.MethodGet && strings.HasSuffix(path, "/pulls"):
		return true, false
	case fault.Status != 0:
		writeError(w, fault.Status, http.StatusText(fault.Status))
		return false, true
	}
	return false, false
}
