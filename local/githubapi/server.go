// Package githubapi is a local stand-in for the GitHub REST API, for tests and
// the local demo. It serves the endpoints petri-sync uses (pull requests,
// commit statuses, check runs, issue comments, GitHub App installation
// tokens), answers conditional requests with ETags and 304s the way GitHub
// does (a 304 costs no rate limit), records every request, fails on demand,
// and builds signed webhook deliveries from GitHub's real example payloads.
//
// It also serves what the pull-request lifecycle uses: comment listings
// with since, reactions, collaborator permissions, deployments and their
// statuses. Each resource's routes live in a file named after it; auth.go
// holds token and GitHub App authentication, webhook.go the deliveries.
//
// It keeps state in memory only and implements only what Petri calls: no
// repositories' contents, no users beyond the collaborator permissions a
// test sets, no GraphQL.
package githubapi

import (
	"cmp"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Request is one recorded HTTP request and the status it was answered with.
type Request struct {
	Method string
	Path   string
	Query  string
	// Conditional is true when the request carried If-None-Match.
	Conditional bool
	Status      int
	// SecondaryLimited is true when it was refused for a secondary rate
	// limit (secondary.go).
	SecondaryLimited bool
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
	// Address is where the server listens (host:port); a free port on
	// 127.0.0.1 when empty. The real node's pods reach the host at the
	// host end of the node's link.
	Address string
	// Clock is the server's time: the windows of the secondary rate limits
	// (secondary.go), tokens' expiry, comments' times. The real clock when
	// nil; a test moves a fake one.
	Clock clock.PassiveClock
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
	// more holds reactions, permissions and deployments.
	more more
	// conns counts the TCP connections clients opened.
	conns atomic.Int64
	// limits count each identity's requests against GitHub's secondary
	// rate limits.
	limits secondaryLimits
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
	if opts.Clock != nil {
		s.now = opts.Clock.Now
		s.reset = s.now().Add(time.Hour)
	}
	for _, t := range opts.Tokens {
		s.tokens[t] = time.Time{}
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if opts.Address != "" {
		l, err := net.Listen("tcp", opts.Address)
		if err != nil {
			panic(fmt.Sprintf("githubapi: listen on %s: %v", opts.Address, err))
		}
		_ = s.srv.Listener.Close()
		s.srv.Listener = l
	}
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
	limited := false
	defer func() {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Conditional: r.Header.Get("If-None-Match") != "", Status: rec.status, SecondaryLimited: limited})
		s.mu.Unlock()
	}()
	done, ok := s.admit(rec, r)
	if !ok {
		limited = true
		return
	}
	defer done()
	path := r.URL.Path
	if p := strings.TrimSuffix(s.opts.PathPrefix, "/"); p != "" {
		if !strings.HasPrefix(path, p+"/") {
			writeError(rec, http.StatusNotFound, "Not Found")
			return
		}
		path = strings.TrimPrefix(path, p)
	}

	emptyList, answered := s.applyFault(rec, r, path)
	if answered {
		return
	}

	if r.Method == http.MethodPost && strings.HasPrefix(path, "/app/installations/") && strings.HasSuffix(path, "/access_tokens") {
		s.issueInstallationToken(rec, r)
		return
	}
	if r.Method == http.MethodGet && path == "/app" {
		s.app(rec, r)
		return
	}
	if !s.authorized(r) {
		writeError(rec, http.StatusUnauthorized, "Bad credentials")
		return
	}
	if r.Method == http.MethodGet && path == "/user" {
		s.currentUser(rec)
		return
	}
	s.route(rec, r, path, emptyList)
}

// SHA returns a deterministic 40-character hex commit id for a seed.
func SHA(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return fmt.Sprintf("%x", sum[:20])
}

// ErrNoSuchPullRequest is returned for a webhook about an unknown pull request.
var ErrNoSuchPullRequest = errors.New("no such pull request")

// route sends a request under /repos/{owner}/{repo}/ to the handler of its
// resource.
func (s *Server) route(w http.ResponseWriter, r *http.Request, path string, emptyList bool) {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) < 4 || seg[0] != "repos" {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	repository := seg[1] + "/" + seg[2]
	rest := seg[3:]
	get, post := r.Method == http.MethodGet, r.Method == http.MethodPost
	switch {
	case get && len(rest) == 2 && rest[0] == "issues" && rest[1] == "comments":
		s.listRepositoryComments(w, r, repository)
	case post && len(rest) == 4 && rest[0] == "issues" && rest[1] == "comments" && rest[3] == "reactions":
		id, _ := strconv.ParseInt(rest[2], 10, 64)
		s.react(w, r, repository, id)
	case get && len(rest) == 3 && rest[0] == "collaborators" && rest[2] == "permission":
		s.permission(w, r, repository, rest[1])
	case post && len(rest) == 1 && rest[0] == "deployments":
		s.createDeployment(w, r, repository)
	case get && len(rest) == 1 && rest[0] == "deployments":
		s.listDeployments(w, r, repository)
	case len(rest) == 3 && rest[0] == "deployments" && rest[2] == "statuses":
		id, _ := strconv.ParseInt(rest[1], 10, 64)
		switch r.Method {
		case http.MethodPost:
			s.createDeploymentStatus(w, r, repository, id)
		case http.MethodGet:
			s.listDeploymentStatuses(w, r, repository, id)
		default:
			writeError(w, http.StatusNotFound, "Not Found")
		}
	case get && len(rest) == 1 && rest[0] == "pulls":
		s.listPulls(w, r, repository, emptyList)
	case get && len(rest) == 2 && rest[0] == "pulls":
		n, _ := strconv.Atoi(rest[1])
		s.getPull(w, r, repository, n)
	case get && len(rest) == 3 && rest[0] == "commits" && rest[2] == "status":
		s.combinedStatus(w, r, repository, rest[1])
	case get && len(rest) == 3 && rest[0] == "commits" && rest[2] == "statuses":
		s.listStatuses(w, r, repository, rest[1])
	case get && len(rest) == 3 && rest[0] == "commits" && rest[2] == "check-runs":
		s.listCheckRuns(w, r, repository, rest[1])
	case post && len(rest) == 2 && rest[0] == "statuses":
		s.createStatus(w, r, repository, rest[1])
	case len(rest) == 3 && rest[0] == "issues" && rest[2] == "comments":
		n, _ := strconv.Atoi(rest[1])
		if post {
			s.createComment(w, r, repository, n)
			return
		}
		s.listComments(w, r, repository, n)
	case get && len(rest) == 3 && rest[0] == "issues" && rest[2] == "events":
		n, _ := strconv.Atoi(rest[1])
		s.listIssueEvents(w, r, repository, n)
	case r.Method == http.MethodPatch && len(rest) == 3 && rest[0] == "issues" && rest[1] == "comments":
		id, _ := strconv.ParseInt(rest[2], 10, 64)
		s.editComment(w, r, repository, id)
	default:
		writeError(w, http.StatusNotFound, "Not Found")
	}
}

// more is the server's state for these endpoints.
type more struct {
	reactions   map[string]map[int64][]Reaction // repository -> comment id
	permissions map[string]map[string]string    // repository -> user -> role
	deleted     map[string]bool                 // users that are no more
	deployments map[string][]*Deployment        // repository, oldest first
	depStatuses map[string]map[int64][]DeploymentStatus
	labelEvents map[string]map[int][]LabelEvent // repository -> pull request
	nextEventID int64
}

func (s *Server) moreState() *more {
	m := &s.more
	if m.reactions == nil {
		m.reactions = map[string]map[int64][]Reaction{}
		m.permissions = map[string]map[string]string{}
		m.deleted = map[string]bool{}
		m.deployments = map[string][]*Deployment{}
		m.depStatuses = map[string]map[int64][]DeploymentStatus{}
		m.labelEvents = map[string]map[int][]LabelEvent{}
	}
	return m
}

// apiUser is the login the server's token acts as.
const apiUser = "petri[bot]"
