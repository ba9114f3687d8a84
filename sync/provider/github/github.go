// Package github is the GitHub implementation of sync's three provider
// roles (pullrequests.go, reporter.go, commands.go), through go-github. Every GET is conditional (ETag), so a periodic resync of an
// unchanged repository costs no rate limit; rate-limit refusals and
// Retry-After are honoured by refusing further calls until the announced
// time, and writes are kept within GitHub's secondary rate limits
// (limits.go).
package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/utils/clock"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/provider/internal/forge"
)

// DefaultBaseURL is github.com's API.
const DefaultBaseURL = "https://api.github.com/"

// Options configure the GitHub provider.
type Options struct {
	// BaseURL is the API base, such as https://ghe.example.com/api/v3/ for
	// GitHub Enterprise Server. DefaultBaseURL when empty.
	BaseURL string
	// HTTPClient supplies the transport (and its TLS settings) and the
	// timeout of each request; http.DefaultClient when nil.
	HTTPClient *http.Client
	// Auth adds credentials; unauthenticated when nil.
	Auth Auth
	// Observer counts requests and tracks the rate limit.
	Observer Observer
	// CacheEntries bounds the conditional-request cache; 10000 when zero.
	CacheEntries int
	// Login is the login sync's credentials act as, the author of sync's
	// comment; asked of GitHub when empty (GET /user for a token, GET /app
	// for an App, whose bot is "<slug>[bot]").
	Login string
	// Clock tells when an announced rate limit ends, and times the writes
	// kept within GitHub's secondary rate limits (limits.go); the real one
	// when nil.
	Clock clock.PassiveClock
}

// Provider talks to one GitHub (or GitHub Enterprise) API.
type Provider struct {
	client *gh.Client
	obs    *observingTransport
	limits *limitTransport
	clock  clock.PassiveClock

	blocker  *forge.Blocker
	comments *forge.Comments
	// login is whose comments are sync's own; learnt once (loginOf).
	login   forge.Login
	loginOf func(ctx context.Context) (string, error)
	// posted remembers the commit statuses this process posted.
	posted postedStatuses
}

var (
	_ provider.PullRequestSource = (*Provider)(nil)
	_ provider.Reporter          = (*Provider)(nil)
	_ provider.CommandReader     = (*Provider)(nil)
	_ provider.Forgetter         = (*Provider)(nil)
)

// idleConnsPerHost is how many idle connections to the GitHub API are kept.
// Go's default transport keeps 2 per host: with sync's reconcile workers,
// feedback and gates calling GitHub at once, every connection beyond those
// was closed after one request and the next one paid a new TCP and TLS
// handshake (docs/benchmarks.md has what that cost).
const idleConnsPerHost = 32

// newBaseTransport is Go's default transport, keeping idleConnsPerHost
// idle connections per host.
func newBaseTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = idleConnsPerHost
	return t
}

// New builds a provider.
func New(opts Options) (*Provider, error) {
	base := newBaseTransport()
	timeout := time.Duration(0)
	if opts.HTTPClient != nil {
		if opts.HTTPClient.Transport != nil {
			base = opts.HTTPClient.Transport
		}
		timeout = opts.HTTPClient.Timeout
	}
	baseURL := opts.BaseURL
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	if !strings.HasSuffix(baseURL, "/") {
		baseURL += "/"
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("github api base url %q: must be an http(s) URL", opts.BaseURL)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	obs := &observingTransport{next: base, obs: opts.Observer}
	limits := newLimitTransport(obs, clk)
	var rt http.RoundTripper = limits
	if opts.Auth != nil {
		if rt, err = opts.Auth(rt, baseURL); err != nil {
			return nil, err
		}
	}
	app, _ := rt.(*appTransport)
	entries := opts.CacheEntries
	if entries == 0 {
		entries = 10000
	}
	rt = newETagTransport(rt, entries)
	c := gh.NewClient(&http.Client{Transport: rt, Timeout: timeout})
	c.BaseURL = u
	c.UploadURL = u
	p := &Provider{client: c, obs: obs, limits: limits, clock: clk, comments: forge.NewComments(),
		blocker: forge.NewBlocker(clk, "not calling GitHub before the announced reset")}
	p.login.Set(opts.Login)
	p.loginOf = p.userLogin
	if app != nil {
		p.loginOf = app.appLogin
	}
	return p, nil
}

// Login is the login sync's credentials act as: the author of every
// comment sync writes, and so the only author whose comment sync edits.
func (p *Provider) Login(ctx context.Context) (string, error) {
	return p.login.Get(ctx, p.loginOf)
}

// userLogin asks GitHub whose token sync holds.
func (p *Provider) userLogin(ctx context.Context) (string, error) {
	if err := p.before(); err != nil {
		return "", err
	}
	u, resp, err := p.client.Users.Get(ctx, "")
	if err := p.after(resp, err); err != nil {
		return "", fmt.Errorf("read the token's user: %w", err)
	}
	if u.GetLogin() == "" {
		return "", errors.New("read the token's user: no login in GitHub's answer")
	}
	return u.GetLogin(), nil
}

// RateLimit returns the remaining core rate limit and its reset time, as
// last announced by GitHub.
func (p *Provider) RateLimit() (int, time.Time) { return p.obs.rateLimit() }

var split = forge.SplitRepository

// before refuses calls while a rate limit announced by GitHub lasts.
func (p *Provider) before() error { return p.blocker.Before() }

// beforeWrite refuses, before the reads a write needs, a write that
// GitHub's secondary rate limits would not let through (limits.go).
func (p *Provider) beforeWrite() error {
	if err := p.before(); err != nil {
		return err
	}
	return p.limits.writable()
}

// after classifies an error, remembering rate limits.
func (p *Provider) after(resp *gh.Response, err error) error {
	if err == nil {
		return nil
	}
	var until time.Time
	var rle *gh.RateLimitError
	var abuse *gh.AbuseRateLimitError
	var er *gh.ErrorResponse
	switch {
	case errors.As(err, &rle):
		until = rle.Rate.Reset.Time
	case errors.As(err, &abuse):
		wait := time.Minute
		if abuse.RetryAfter != nil {
			wait = *abuse.RetryAfter
		}
		until = p.clock.Now().Add(wait)
	case errors.As(err, &er) && er.Response != nil:
		// go-github's text names the status.
		return p.blocker.Answer(er.Response.StatusCode, er.Response.Header, err, true, nil)
	default:
		return err
	}
	if now := p.clock.Now(); until.Before(now) {
		until = now.Add(time.Second)
	}
	return p.blocker.Block(until, err)
}
