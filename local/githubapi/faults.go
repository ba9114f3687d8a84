package githubapi

import (
	"net/http"
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
