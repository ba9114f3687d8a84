// Package gitlabapi is a local stand-in for the part of GitLab's REST API
// v4 that sync's GitLab provider calls, for its tests: projects by their
// URL-encoded full path (nested groups included) or id, merge requests
// (listed with state and updated_after, read one by one), notes with their
// authors, award emoji, commit statuses, pipelines and their jobs, members
// with inherited access levels, users, environments and deployments.
//
// It behaves the way GitLab does where the provider depends on it: a note
// touches its merge request's updated_at, only a note's author may edit it,
// the same award emoji twice by one user is a 404 "has already been
// taken", a pending commit status cannot be set pending again, a finished
// deployment cannot run again. Its state is seeded by the test (seed.go),
// its clock is the test's, every request is recorded, and rate limiting is
// played on demand: RateLimit-* headers on every answer, 429s with
// Retry-After for the next requests.
//
// It keeps state in memory only and implements only what the provider
// calls.
package gitlabapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request is one recorded request and the status it was answered with.
type Request struct {
	Method string
	// Path is the path as sent, escaped (/api/v4/projects/a%2Fb/...).
	Path   string
	Query  url.Values
	Status int
}

// Options configure a Server.
type Options struct {
	// Tokens map each accepted access token (PRIVATE-TOKEN) to its user's
	// username; the users are created. Requests with any other token, or
	// none, are answered 401.
	Tokens map[string]string
	// Now is the server's clock (updated_at, Date); time.Now when nil.
	// SetNow and Advance move it.
	Now func() time.Time
}

// Server is a running GitLab API stand-in.
type Server struct {
	// URL is the server's root; the API is under URL + "/api/v4".
	URL string

	srv *httptest.Server
	mu  sync.Mutex
	now func() time.Time
	// offset moves the clock (Advance).
	offset time.Duration
	tokens map[string]string

	nextID   int64
	users    map[string]*user
	projects map[string]*project
	byID     map[int64]*project
	requests []Request
	limit    rateLimit
	hook     hookState
}

// rateLimit is what the server says of its rate limit.
type rateLimit struct {
	// limit, remaining and reset are sent as RateLimit-* when limit > 0.
	limit, remaining int
	reset            time.Time
	// refuse answers the next refuse requests 429 with Retry-After.
	refuse     int
	retryAfter time.Duration
}

// New starts a server on a loopback port.
func New(opts Options) *Server {
	s := &Server{
		now:      opts.Now,
		tokens:   map[string]string{},
		nextID:   100,
		users:    map[string]*user{},
		projects: map[string]*project{},
		byID:     map[int64]*project{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	for tok, name := range opts.Tokens {
		s.tokens[tok] = name
		s.addUser(name)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Requests returns the requests recorded so far, oldest first: what a
// test counts the cost of a call by.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ResetRequests forgets the requests recorded, so that a test counts those
// of one step.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	s.requests = nil
	s.mu.Unlock()
}

// SetNow sets the server's clock.
func (s *Server) SetNow(t time.Time) {
	s.mu.Lock()
	s.now, s.offset = func() time.Time { return t }, 0
	s.mu.Unlock()
}

// Advance moves the server's clock forward.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	s.offset += d
	s.mu.Unlock()
}

// clock is the server's time. The caller holds s.mu.
func (s *Server) clock() time.Time { return s.now().Add(s.offset).UTC() }

// SetRateLimit makes every answer carry RateLimit-Limit, -Remaining and
// -Reset (Unix seconds) with these values; a limit of 0 sends none.
func (s *Server) SetRateLimit(limit, remaining int, reset time.Time) {
	s.mu.Lock()
	s.limit.limit, s.limit.remaining, s.limit.reset = limit, remaining, reset
	s.mu.Unlock()
}

// RefuseNext answers the next n requests 429 Too Many Requests with
// Retry-After (whole seconds; none when zero).
func (s *Server) RefuseNext(n int, retryAfter time.Duration) {
	s.mu.Lock()
	s.limit.refuse, s.limit.retryAfter = n, retryAfter
	s.mu.Unlock()
}

// apiError is GitLab's error body.
type apiError struct {
	status  int
	message string
}

func (e *apiError) Error() string { return e.message }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, message: fmt.Sprintf(format, args...)}
}

// call is one request as a handler sees it.
type call struct {
	r    *http.Request
	self *user
	// parts are the path's segments after /api/v4, unescaped one by one.
	parts  []string
	params map[string]any
}

// str is a parameter as a string, from the body or the query.
func (c *call) str(name string) string {
	if v, ok := c.params[name]; ok {
		switch v := v.(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			return strconv.FormatBool(v)
		}
	}
	return c.r.URL.Query().Get(name)
}

// has tells whether a parameter was given.
func (c *call) has(name string) bool {
	_, ok := c.params[name]
	return ok || c.r.URL.Query().Has(name)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	status, body := s.answer(w, r)
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Status: status})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Date", s.clock().Format(http.TimeFormat))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// answer routes a request; it returns the status and the body to write.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) (int, any) {
	if l := s.limit; l.limit > 0 {
		w.Header().Set("RateLimit-Limit", strconv.Itoa(l.limit))
		w.Header().Set("RateLimit-Remaining", strconv.Itoa(l.remaining))
		w.Header().Set("RateLimit-Reset", strconv.FormatInt(l.reset.Unix(), 10))
	}
	if s.limit.refuse > 0 {
		s.limit.refuse--
		if s.limit.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(s.limit.retryAfter/time.Second)))
		}
		return http.StatusTooManyRequests, map[string]string{"message": "429 Too Many Requests"}
	}
	name, ok := s.tokens[r.Header.Get("PRIVATE-TOKEN")]
	if !ok {
		return http.StatusUnauthorized, map[string]string{"message": "401 Unauthorized"}
	}
	c := &call{r: r, self: s.users[strings.ToLower(name)], params: map[string]any{}}
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/v4/")
	if !ok {
		return http.StatusNotFound, map[string]string{"error": "404 Not Found"}
	}
	for _, seg := range strings.Split(strings.TrimSuffix(rest, "/"), "/") {
		part, err := url.PathUnescape(seg)
		if err != nil {
			return http.StatusBadRequest, map[string]string{"error": "bad path"}
		}
		c.parts = append(c.parts, part)
	}
	if r.Body != nil && (r.Method == http.MethodPost || r.Method == http.MethodPut) {
		if err := json.NewDecoder(r.Body).Decode(&c.params); err != nil && !errors.Is(err, io.EOF) {
			return http.StatusBadRequest, map[string]string{"error": "body is not JSON: " + err.Error()}
		}
	}
	out, err := s.route(w, c)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return ae.status, map[string]string{"message": ae.message}
		}
		return http.StatusInternalServerError, map[string]string{"message": err.Error()}
	}
	if r.Method == http.MethodPost {
		return http.StatusCreated, out
	}
	return http.StatusOK, out
}

// route finds the handler of a call by its method and path.
func (s *Server) route(w http.ResponseWriter, c *call) (any, error) {
	p, m := c.parts, c.r.Method
	switch {
	case m == http.MethodGet && len(p) == 1 && p[0] == "user":
		return userJSON(c.self), nil
	case m == http.MethodGet && len(p) == 1 && p[0] == "users":
		return s.listUsers(c), nil
	case len(p) >= 2 && p[0] == "projects":
		pr, err := s.project(p[1])
		if err != nil {
			return nil, err
		}
		return s.routeProject(w, c, pr, p[2:])
	}
	return nil, errorf(http.StatusNotFound, "404 Not Found")
}

// routeProject routes a call under /projects/:id.
func (s *Server) routeProject(w http.ResponseWriter, c *call, pr *project, p []string) (any, error) {
	m := c.r.Method
	switch {
	case len(p) == 0 && m == http.MethodGet:
		return map[string]any{"id": pr.id, "path_with_namespace": pr.path}, nil
	case len(p) >= 1 && p[0] == "merge_requests":
		return s.routeMergeRequests(w, c, pr, p[1:])
	case len(p) == 4 && p[0] == "repository" && p[1] == "commits" && p[3] == "statuses" && m == http.MethodGet:
		return s.listStatuses(w, c, pr, p[2]), nil
	case len(p) == 2 && p[0] == "statuses" && m == http.MethodPost:
		return s.setStatus(c, pr, p[1])
	case len(p) == 1 && p[0] == "pipelines" && m == http.MethodGet:
		return s.listPipelines(w, c, pr), nil
	case len(p) == 3 && p[0] == "pipelines" && p[2] == "jobs" && m == http.MethodGet:
		return s.listJobs(w, c, pr, p[1])
	case len(p) == 3 && p[0] == "members" && p[1] == "all" && m == http.MethodGet:
		return s.member(pr, p[2])
	case len(p) >= 1 && p[0] == "environments":
		return s.routeEnvironments(c, pr, p[1:])
	case len(p) >= 1 && p[0] == "deployments":
		return s.routeDeployments(w, c, pr, p[1:])
	}
	return nil, errorf(http.StatusNotFound, "404 Not Found")
}

// paginate answers one page of n items as GitLab does (page, per_page,
// X-Next-Page and the rest); it returns the page's bounds.
func paginate(w http.ResponseWriter, c *call, n int) (int, int) {
	per, err := strconv.Atoi(c.str("per_page"))
	if err != nil || per <= 0 {
		per = 20
	}
	per = min(per, 100)
	page, err := strconv.Atoi(c.str("page"))
	if err != nil || page <= 0 {
		page = 1
	}
	pages := max(1, (n+per-1)/per)
	h := w.Header()
	h.Set("X-Page", strconv.Itoa(page))
	h.Set("X-Per-Page", strconv.Itoa(per))
	h.Set("X-Total", strconv.Itoa(n))
	h.Set("X-Total-Pages", strconv.Itoa(pages))
	if page < pages {
		h.Set("X-Next-Page", strconv.Itoa(page+1))
	}
	lo := min(n, (page-1)*per)
	return lo, min(n, lo+per)
}

// stamp is a time as GitLab writes it in its API; null when zero.
func stamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// sortDesc tells whether a listing asks for descending order (GitLab's
// default).
func sortDesc(c *call) bool { return c.str("sort") != "asc" }
