package githubapi

import (
	"cmp"
	"net/http"
	"strconv"
	"time"
)

// RateLimitRemaining is the core rate limit left.
func (s *Server) RateLimitRemaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.remain
}

// charge spends one request of the rate limit and writes the headers.
func (s *Server) charge(w http.ResponseWriter) {
	s.mu.Lock()
	if s.now().After(s.reset) {
		s.remain, s.reset = s.limit(), s.now().Add(time.Hour)
	}
	if s.remain > 0 {
		s.remain--
	}
	s.mu.Unlock()
	s.rateHeaders(w)
}

func (s *Server) rateHeaders(w http.ResponseWriter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.limit()))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(s.remain))
	h.Set("X-RateLimit-Used", strconv.Itoa(s.limit()-s.remain))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(s.reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
}

// limit is the requests per hour.
func (s *Server) limit() int { return cmp.Or(s.opts.RateLimit, 5000) }
