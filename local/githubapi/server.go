// Package githubapi is a local stand-in for the GitHub REST API, for tests and
// the local demo. It serves the endpoints petri-sync uses (pull requests,
// commit statuses, check runs, issue comments, GitHub App installation
// tokens), answers conditional requests with ETags and 304s the way GitHub
// does (a 304 costs no rate limit), records every request, fails on demand,
// and builds signed webhook deliveries from GitHub's real example payloads.
//
// It also serves what the pull-request lifecycle uses (comment listings
// with since, reactions, collaborator permissions, deployments and their
// statuses; lifecycle.go).
//
// It keeps state in memory only and implements only what Petri calls: no
// repositories' contents, no users beyond the collaborator permissions a
// test sets, no GraphQL.
package githubapi

import (
	"cmp"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// PullRequest is the server's state of one pull request.
type PullRequest struct {
	Number     int
	Title      string
	Author     string
	HeadRef    string
	HeadSHA    string
	BaseRef    string
	Labels     []string
	Draft      bool
	State      string // open or closed
	Merged     bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Repository string
}

// Status is one commit status as posted through the API.
type Status struct {
	ID          int64
	Context     string
	State       string
	Description string
	TargetURL   string
	CreatedAt   time.Time
}

// CheckRun is one check run on a commit.
type CheckRun struct {
	Name       string
	Status     string // queued, in_progress, completed
	Conclusion string // success, failure, ... when completed
}

// Comment is one issue comment.
type Comment struct {
	ID     int64
	Body   string
	Author string
	Edits  int
	// Number is the pull request the comment is on.
	Number    int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Request is one recorded HTTP request and the status it was answered with.
type Request struct {
	Method string
	Path   string
	Query  string
	// Conditional is true when the request carried If-None-Match.
	Conditional bool
	Status      int
}

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

// Options configure a Server.
type Options struct {
	// Tokens are the accepted personal access tokens. When empty and no App
	// key is set, requests need no authentication.
	Tokens []string
	// PathPrefix is served in front of every path, such as /api/v3 for a
	// GitHub Enterprise Server layout.
	PathPrefix string
	// AppID and AppKey enable GitHub App authentication: a JWT signed by the
	// key's private half buys an installation token.
	AppID  int64
	AppKey *rsa.PublicKey
	// InstallationTokenTTL is the lifetime of issued installation tokens;
	// one hour when zero.
	InstallationTokenTTL time.Duration
	// RateLimit is the requests per hour the server allows (answers other
	// than 304 spend it); GitHub's 5,000 of a personal token when zero.
	RateLimit int
}

type repo struct {
	prs       map[int]*PullRequest
	statuses  map[string][]Status
	checkRuns map[string][]CheckRun
	comments  map[int][]*Comment
}

// Server is a running GitHub API stand-in.
type Server struct {
	// URL is the API base URL, PathPrefix included, with a trailing slash.
	URL string

	opts     Options
	srv      *httptest.Server
	mu       sync.Mutex
	repos    map[string]*repo
	requests []Request
	fault    *Fault
	tokens   map[string]time.Time
	issued   int
	nextID   int64
	remain   int
	reset    time.Time
	now      func() time.Time
	// more holds reactions, permissions and deployments (lifecycle.go).
	more more
	// conns counts the TCP connections clients opened.
	conns atomic.Int64
}

// New starts a server on a loopback port.
func New(opts Options) *Server {
	s := &Server{
		opts:   opts,
		repos:  map[string]*repo{},
		tokens: map[string]time.Time{},
		nextID: 1000,
		remain: cmp.Or(opts.RateLimit, 5000),
		reset:  time.Now().Add(time.Hour),
		now:    time.Now,
	}
	for _, t := range opts.Tokens {
		s.tokens[t] = time.Time{}
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.Start()
	s.URL = s.srv.URL + strings.TrimSuffix(opts.PathPrefix, "/") + "/"
	return s
}

// Connections returns how many TCP connections clients have opened to the
// server: a client that keeps its connections alive opens few.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Client returns an HTTP client for the server.
func (s *Server) Client() *http.Client { return s.srv.Client() }

func (s *Server) repo(name string) *repo {
	key := strings.ToLower(name)
	r := s.repos[key]
	if r == nil {
		r = &repo{prs: map[int]*PullRequest{}, statuses: map[string][]Status{}, checkRuns: map[string][]CheckRun{}, comments: map[int][]*Comment{}}
		s.repos[key] = r
	}
	return r
}

// OpenPullRequest adds an open pull request (defaults filled in) and returns it.
func (s *Server) OpenPullRequest(repository string, pr PullRequest) PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(repository)
	if pr.Number == 0 {
		pr.Number = len(r.prs) + 1
		for r.prs[pr.Number] != nil {
			pr.Number++
		}
	}
	if pr.State == "" {
		pr.State = "open"
	}
	if pr.Author == "" {
		pr.Author = "octocat"
	}
	if pr.Title == "" {
		pr.Title = fmt.Sprintf("Change number %d", pr.Number)
	}
	if pr.HeadRef == "" {
		pr.HeadRef = fmt.Sprintf("feature/change-%d", pr.Number)
	}
	if pr.BaseRef == "" {
		pr.BaseRef = "main"
	}
	if pr.HeadSHA == "" {
		pr.HeadSHA = SHA(fmt.Sprintf("%s#%d", repository, pr.Number))
	}
	now := s.now().UTC().Truncate(time.Second)
	pr.CreatedAt, pr.UpdatedAt = now, now
	pr.Repository = repository
	r.prs[pr.Number] = &pr
	return pr
}

// UpdatePullRequest changes a pull request and bumps its updated_at.
func (s *Server) UpdatePullRequest(repository string, number int, change func(*PullRequest)) PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.repo(repository).prs[number]
	if pr == nil {
		panic(fmt.Sprintf("githubapi: no pull request %s#%d", repository, number))
	}
	change(pr)
	// updated_at has a resolution of one second on GitHub; keep it strictly
	// increasing so that ordering by it works in tests that move fast.
	next := s.now().UTC().Truncate(time.Second)
	if !next.After(pr.UpdatedAt) {
		next = pr.UpdatedAt.Add(time.Second)
	}
	pr.UpdatedAt = next
	return *pr
}

// PullRequest returns the state of one pull request.
func (s *Server) PullRequest(repository string, number int) PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.repo(repository).prs[number]
}

// SetCheckRun creates or replaces the check run of that name on a commit.
func (s *Server) SetCheckRun(repository, sha string, run CheckRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(repository)
	runs := r.checkRuns[sha]
	for i := range runs {
		if runs[i].Name == run.Name {
			runs[i] = run
			return
		}
	}
	r.checkRuns[sha] = append(runs, run)
}

// SetStatus posts a commit status as another integration (CI) would.
func (s *Server) SetStatus(repository, sha, context, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	r := s.repo(repository)
	r.statuses[sha] = append(r.statuses[sha], Status{ID: s.nextID, Context: context, State: state, CreatedAt: s.now()})
}

// Statuses returns every status posted on a commit, oldest first.
func (s *Server) Statuses(repository, sha string) []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.repo(repository).statuses[sha])
}

// Comments returns the comments of a pull request.
func (s *Server) Comments(repository string, number int) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range s.repo(repository).comments[number] {
		out = append(out, *c)
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

// SetFault makes the server misbehave; nil restores normal service.
func (s *Server) SetFault(f *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// Requests returns the recorded requests.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// ResetRequests forgets the recorded requests.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = nil
}

// InstallationTokensIssued counts the installation tokens issued so far.
func (s *Server) InstallationTokensIssued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issued
}

// RateLimitRemaining is the core rate limit left.
func (s *Server) RateLimitRemaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.remain
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Conditional: r.Header.Get("If-None-Match") != "", Status: rec.status})
		s.mu.Unlock()
	}()
	path := r.URL.Path
	if p := strings.TrimSuffix(s.opts.PathPrefix, "/"); p != "" {
		if !strings.HasPrefix(path, p+"/") {
			writeError(rec, http.StatusNotFound, "Not Found")
			return
		}
		path = strings.TrimPrefix(path, p)
	}

	s.mu.Lock()
	fault := s.fault
	s.mu.Unlock()
	emptyList := false
	if fault != nil && (fault.Match == nil || fault.Match(r)) {
		if fault.Delay > 0 {
			select {
			case <-time.After(fault.Delay):
			case <-r.Context().Done():
				return
			}
		}
		switch {
		case fault.RateLimited:
			s.mu.Lock()
			reset := s.now().Add(fault.RetryAfter)
			s.mu.Unlock()
			h := rec.Header()
			h.Set("X-RateLimit-Limit", "5000")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
			writeError(rec, http.StatusForbidden, "API rate limit exceeded")
			return
		case fault.SecondaryRateLimited:
			rec.Header().Set("Retry-After", strconv.Itoa(int(fault.RetryAfter.Seconds())))
			rec.Header().Set("Content-Type", "application/json")
			rec.WriteHeader(http.StatusForbidden)
			_, _ = rec.Write([]byte(`{"message":"You have exceeded a secondary rate limit.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`))
			return
		case fault.EmptyList && r.Method == http.MethodGet && strings.HasSuffix(path, "/pulls"):
			emptyList = true
		case fault.Status != 0:
			writeError(rec, fault.Status, http.StatusText(fault.Status))
			return
		}
	}

	if r.Method == http.MethodPost && strings.HasPrefix(path, "/app/installations/") && strings.HasSuffix(path, "/access_tokens") {
		s.issueInstallationToken(rec, r)
		return
	}
	if !s.authorized(r) {
		writeError(rec, http.StatusUnauthorized, "Bad credentials")
		return
	}
	s.route(rec, r, path, emptyList)
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

func (s *Server) route(w http.ResponseWriter, r *http.Request, path string, emptyList bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) < 4 || seg[0] != "repos" {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	repository := seg[1] + "/" + seg[2]
	rest := seg[3:]
	if s.routeMore(w, r, repository, rest) {
		return
	}
	switch {
	case r.Method == http.MethodGet && len(rest) == 1 && rest[0] == "pulls":
		s.listPulls(w, r, repository, emptyList)
	case r.Method == http.MethodGet && len(rest) == 2 && rest[0] == "pulls":
		n, _ := strconv.Atoi(rest[1])
		s.mu.Lock()
		pr := s.repo(repository).prs[n]
		var body any
		if pr != nil {
			body = pullJSON(*pr)
		}
		s.mu.Unlock()
		if pr == nil {
			writeError(w, http.StatusNotFound, "Not Found")
			return
		}
		s.writeCached(w, r, body)
	case r.Method == http.MethodGet && len(rest) == 3 && rest[0] == "commits" && rest[2] == "status":
		s.combinedStatus(w, r, repository, rest[1])
	case r.Method == http.MethodGet && len(rest) == 3 && rest[0] == "commits" && rest[2] == "statuses":
		s.mu.Lock()
		sts := slices.Clone(s.repo(repository).statuses[rest[1]])
		s.mu.Unlock()
		slices.Reverse(sts) // newest first, as GitHub lists them
		out := []any{}
		for _, st := range sts {
			out = append(out, statusJSON(st))
		}
		s.writeCached(w, r, out)
	case r.Method == http.MethodGet && len(rest) == 3 && rest[0] == "commits" && rest[2] == "check-runs":
		s.mu.Lock()
		runs := slices.Clone(s.repo(repository).checkRuns[rest[1]])
		s.mu.Unlock()
		out := []any{}
		for _, c := range runs {
			if name := r.URL.Query().Get("check_name"); name != "" && name != c.Name {
				continue
			}
			run := map[string]any{"name": c.Name, "status": c.Status, "head_sha": rest[1]}
			if c.Conclusion != "" {
				run["conclusion"] = c.Conclusion
			}
			out = append(out, run)
		}
		s.writeCached(w, r, map[string]any{"total_count": len(out), "check_runs": out})
	case r.Method == http.MethodPost && len(rest) == 2 && rest[0] == "statuses":
		var in struct {
			State       string `json:"state"`
			Context     string `json:"context"`
			Description string `json:"description"`
			TargetURL   string `json:"target_url"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.State == "" {
			writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
			return
		}
		if in.Context == "" {
			in.Context = "default"
		}
		s.mu.Lock()
		s.nextID++
		st := Status{ID: s.nextID, Context: in.Context, State: in.State, Description: in.Description, TargetURL: in.TargetURL, CreatedAt: s.now()}
		rp := s.repo(repository)
		rp.statuses[rest[1]] = append(rp.statuses[rest[1]], st)
		s.mu.Unlock()
		s.charge(w)
		writeJSON(w, http.StatusCreated, statusJSON(st))
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "comments":
		n, _ := strconv.Atoi(rest[1])
		if r.Method == http.MethodPost {
			var in struct {
				Body string `json:"body"`
			}
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
				writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
				return
			}
			s.mu.Lock()
			s.nextID++
			now := s.now().UTC().Truncate(time.Second)
			c := &Comment{ID: s.nextID, Body: in.Body, Author: "petri[bot]", Number: n, CreatedAt: now, UpdatedAt: now}
			rp := s.repo(repository)
			rp.comments[n] = append(rp.comments[n], c)
			out := commentJSON(repository, *c)
			s.mu.Unlock()
			s.charge(w)
			writeJSON(w, http.StatusCreated, out)
			return
		}
		s.listComments(w, r, repository, n)
	case r.Method == http.MethodPatch && len(rest) == 3 && rest[0] == "issues" && rest[1] == "comments":
		id, _ := strconv.ParseInt(rest[2], 10, 64)
		var in struct {
			Body string `json:"body"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
			return
		}
		s.mu.Lock()
		var found *Comment
		for _, cs := range s.repo(repository).comments {
			for _, c := range cs {
				if c.ID == id {
					found = c
				}
			}
		}
		if found != nil {
			found.Body = in.Body
			found.Edits++
			found.UpdatedAt = s.now().UTC().Truncate(time.Second)
		}
		s.mu.Unlock()
		if found == nil {
			writeError(w, http.StatusNotFound, "Not Found")
			return
		}
		s.charge(w)
		writeJSON(w, http.StatusOK, commentJSON(repository, *found))
	default:
		writeError(w, http.StatusNotFound, "Not Found")
	}
}

func (s *Server) listPulls(w http.ResponseWriter, r *http.Request, repository string, empty bool) {
	state := r.URL.Query().Get("state")
	if state == "" {
		state = "open"
	}
	s.mu.Lock()
	var prs []PullRequest
	if !empty {
		for _, pr := range s.repo(repository).prs {
			if state == "all" || pr.State == state {
				prs = append(prs, *pr)
			}
		}
	}
	s.mu.Unlock()
	// GitHub's default order: newest first.
	sort.Slice(prs, func(i, j int) bool { return prs[i].Number > prs[j].Number })
	out := make([]any, 0, len(prs))
	for _, pr := range prs {
		out = append(out, pullJSON(pr))
	}
	s.paginate(w, r, out)
}

// paginate answers one page of a listing, with GitHub's Link header and a
// conditional-request ETag.
func (s *Server) paginate(w http.ResponseWriter, r *http.Request, items []any) {
	q := r.URL.Query()
	perPage, _ := strconv.Atoi(q.Get("per_page"))
	if perPage <= 0 {
		perPage = 30
	}
	page, _ := strconv.Atoi(q.Get("page"))
	if page <= 0 {
		page = 1
	}
	last := (len(items) + perPage - 1) / perPage
	if last == 0 {
		last = 1
	}
	lo := min((page-1)*perPage, len(items))
	hi := min(page*perPage, len(items))
	link := func(p int, rel string) string {
		u := *r.URL
		u.Scheme, u.Host = "http", r.Host
		qq := u.Query()
		qq.Set("page", strconv.Itoa(p))
		qq.Set("per_page", strconv.Itoa(perPage))
		u.RawQuery = qq.Encode()
		return fmt.Sprintf("<%s>; rel=%q", u.String(), rel)
	}
	var links []string
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"), link(page-1, "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	s.writeCached(w, r, items[lo:hi])
}

func (s *Server) combinedStatus(w http.ResponseWriter, r *http.Request, repository, sha string) {
	s.mu.Lock()
	sts := slices.Clone(s.repo(repository).statuses[sha])
	s.mu.Unlock()
	latest := map[string]Status{}
	var order []string
	for _, st := range sts {
		if _, ok := latest[st.Context]; !ok {
			order = append(order, st.Context)
		}
		latest[st.Context] = st
	}
	state := "success"
	out := []any{}
	for _, c := range order {
		st := latest[c]
		out = append(out, statusJSON(st))
		switch {
		case st.State == "failure" || st.State == "error":
			state = "failure"
		case st.State == "pending" && state != "failure":
			state = "pending"
		}
	}
	if len(out) == 0 {
		state = "pending"
	}
	s.writeCached(w, r, map[string]any{"state": state, "sha": sha, "total_count": len(out), "statuses": out})
}

// writeCached answers a GET with an ETag; a matching If-None-Match gets 304
// and costs no rate limit, as on GitHub.
func (s *Server) writeCached(w http.ResponseWriter, r *http.Request, body any) {
	data, _ := json.Marshal(body)
	sum := sha256.Sum256(data)
	etag := fmt.Sprintf(`W/"%x"`, sum[:16])
	w.Header().Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		s.rateHeaders(w)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.charge(w)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
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

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func pullJSON(pr PullRequest) map[string]any {
	labels := []any{}
	for i, l := range pr.Labels {
		labels = append(labels, map[string]any{"id": i + 1, "name": l})
	}
	owner := strings.Split(pr.Repository, "/")[0]
	html := fmt.Sprintf("https://github.com/%s/pull/%d", pr.Repository, pr.Number)
	out := map[string]any{
		"number":     pr.Number,
		"state":      pr.State,
		"title":      pr.Title,
		"draft":      pr.Draft,
		"merged":     pr.Merged,
		"html_url":   html,
		"user":       map[string]any{"login": pr.Author},
		"labels":     labels,
		"created_at": pr.CreatedAt.Format(time.RFC3339),
		"updated_at": pr.UpdatedAt.Format(time.RFC3339),
		"head": map[string]any{
			"ref": pr.HeadRef, "sha": pr.HeadSHA, "label": owner + ":" + pr.HeadRef,
			"repo": map[string]any{"full_name": pr.Repository},
		},
		"base": map[string]any{
			"ref": pr.BaseRef, "label": owner + ":" + pr.BaseRef,
			"repo": map[string]any{"full_name": pr.Repository},
		},
	}
	if pr.Merged {
		out["merged_at"] = pr.UpdatedAt.Format(time.RFC3339)
	}
	if pr.State == "closed" {
		out["closed_at"] = pr.UpdatedAt.Format(time.RFC3339)
	}
	return out
}

func statusJSON(st Status) map[string]any {
	return map[string]any{"id": st.ID, "context": st.Context, "state": st.State, "description": st.Description, "target_url": st.TargetURL, "created_at": st.CreatedAt.UTC().Format(time.RFC3339)}
}

func commentJSON(repository string, c Comment) map[string]any {
	userType := "User"
	if strings.HasSuffix(c.Author, "[bot]") {
		userType = "Bot"
	}
	return map[string]any{
		"id": c.ID, "body": c.Body, "user": map[string]any{"login": c.Author, "type": userType},
		"url":                fmt.Sprintf("https://api.github.com/repos/%s/issues/comments/%d", repository, c.ID),
		"html_url":           fmt.Sprintf("https://github.com/%s/pull/%d#issuecomment-%d", repository, c.Number, c.ID),
		"issue_url":          fmt.Sprintf("https://api.github.com/repos/%s/issues/%d", repository, c.Number),
		"created_at":         c.CreatedAt.UTC().Format(time.RFC3339),
		"updated_at":         c.UpdatedAt.UTC().Format(time.RFC3339),
		"author_association": "NONE",
	}
}

// SHA returns a deterministic 40-character hex commit id for a seed.
func SHA(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return fmt.Sprintf("%x", sum[:20])
}

// ErrNoSuchPullRequest is returned for a webhook about an unknown pull request.
var ErrNoSuchPullRequest = errors.New("no such pull request")
