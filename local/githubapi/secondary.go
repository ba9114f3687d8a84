package githubapi

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// GitHub's documented secondary rate limits, which the server enforces on
// every identity (each credential), always: no more than
// ContentRequestsPerMinute content-generating requests (POST, PATCH, PUT,
// DELETE) in any minute and ContentRequestsPerHour in any hour, and no
// more than ConcurrentRequests requests at once. Beyond them it answers
// 403 with Retry-After and GitHub's message, and it counts every request
// of that identity that arrives before the Retry-After has passed as a
// violation (Violations): GitHub's documentation says such requests may get
// the integration banned.
const (
	ContentRequestsPerMinute = 80
	ContentRequestsPerHour   = 500
	ConcurrentRequests       = 100
)

// SecondaryRateLimitMessage is the message of GitHub's answer to a request
// beyond a secondary rate limit.
const SecondaryRateLimitMessage = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."

// secondaryRateLimitDocs is the documentation_url of that answer; clients
// (go-github among them) tell a secondary limit by its ending.
const secondaryRateLimitDocs = "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits"

// concurrencyRetryAfter is the wait announced to a request beyond the
// concurrent requests: GitHub's advice without a Retry-After is a minute.
const concurrencyRetryAfter = time.Minute

// identityLimits is what the server counts of one identity.
type identityLimits struct {
	// writes are the arrival times of its accepted content-generating
	// requests within the last hour, oldest first.
	writes   []time.Time
	inFlight int
	// until is when the last Retry-After it was given ends.
	until time.Time
}

// secondaryLimits are the secondary limits' counts of every identity.
type secondaryLimits struct {
	ids        map[[sha256.Size]byte]*identityLimits
	violations []Violation
	refused    int
}

// Violation is a request that arrived before the Retry-After its identity
// was given had passed.
type Violation struct {
	Method, Path string
	// Early is how long before the end of the Retry-After it arrived.
	Early time.Duration
}

// contentGenerating tells the requests GitHub counts as creating content.
func contentGenerating(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// identityOf is whom a request is counted for: its credential (only a
// fingerprint of it is kept); requests without one share an identity.
func identityOf(r *http.Request) [sha256.Size]byte {
	return sha256.Sum256([]byte(r.Header.Get("Authorization")))
}

// admit counts a request against its identity's secondary limits. When it
// is beyond one, admit answers it (403, Retry-After, GitHub's message) and
// returns false; otherwise the caller serves it and calls done after.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (done func(), ok bool) {
	id := identityOf(r)
	s.mu.Lock()
	l := &s.limits
	if l.ids == nil {
		l.ids = map[[sha256.Size]byte]*identityLimits{}
	}
	il := l.ids[id]
	if il == nil {
		il = &identityLimits{}
		l.ids[id] = il
	}
	now := s.now()
	for len(il.writes) > 0 && !il.writes[0].After(now.Add(-time.Hour)) {
		il.writes = il.writes[1:]
	}
	var wait time.Duration
	switch {
	case now.Before(il.until):
		l.violations = append(l.violations, Violation{Method: r.Method, Path: r.URL.Path, Early: il.until.Sub(now)})
		wait = il.until.Sub(now)
	case il.inFlight >= ConcurrentRequests:
		wait = concurrencyRetryAfter
	case contentGenerating(r.Method):
		if len(il.writes) >= ContentRequestsPerHour {
			wait = il.writes[len(il.writes)-ContentRequestsPerHour].Add(time.Hour).Sub(now)
		}
		if n := inLast(il.writes, now, time.Minute); n >= ContentRequestsPerMinute {
			wait = max(wait, il.writes[len(il.writes)-ContentRequestsPerMinute].Add(time.Minute).Sub(now))
		}
	}
	if wait > 0 {
		// Whole seconds, rounded up: a client that waits what it is told
		// never comes back early.
		secs := int((wait + time.Second - 1) / time.Second)
		if until := now.Add(time.Duration(secs) * time.Second); until.After(il.until) {
			il.until = until
		}
		l.refused++
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeSecondaryRateLimit(w)
		return nil, false
	}
	if contentGenerating(r.Method) {
		il.writes = append(il.writes, now)
	}
	il.inFlight++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		il.inFlight--
		s.mu.Unlock()
	}, true
}

// inLast counts the times of ts (oldest first) within d before now.
func inLast(ts []time.Time, now time.Time, d time.Duration) int {
	n := 0
	for i := len(ts) - 1; i >= 0 && ts[i].After(now.Add(-d)); i-- {
		n++
	}
	return n
}

// writeSecondaryRateLimit writes GitHub's 403 for a secondary rate limit
// (the caller sets Retry-After).
func writeSecondaryRateLimit(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = fmt.Fprintf(w, `{"message":%q,"documentation_url":%q}`, SecondaryRateLimitMessage, secondaryRateLimitDocs)
}

// Violations are the requests that arrived before the Retry-After their
// identity was given had passed.
func (s *Server) Violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Violation(nil), s.limits.violations...)
}

// SecondaryRateLimited counts the requests answered 403 for a secondary
// rate limit (violations among them).
func (s *Server) SecondaryRateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits.refused
}

// ContentRequests counts the content-generating requests (POST, PATCH,
// PUT, DELETE) the server served, the ones refused for a limit not among
// them.
func (s *Server) ContentRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if contentGenerating(r.Method) && !r.SecondaryLimited {
			n++
		}
	}
	return n
}
