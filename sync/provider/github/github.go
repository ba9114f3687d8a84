// Package github is the GitHub implementation of provider.Provider, through
// go-github. Every GET is conditional (ETag), so a periodic resync of an
// unchanged repository costs no rate limit; rate-limit refusals and
// Retry-After are honoured by refusing further calls until the announced
// time.
package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/provider"
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
}

// Provider talks to one GitHub (or GitHub Enterprise) API.
type Provider struct {
	client *gh.Client
	obs    *observingTransport

	mu           sync.Mutex
	blockedUntil time.Time
	comments     map[string]commentRef
}

type commentRef struct {
	id   int64
	body string
}

var (
	_ provider.Provider  = (*Provider)(nil)
	_ provider.Forgetter = (*Provider)(nil)
)

// idleConnsPerHost is how many idle connections to the GitHub API are kept.
// Go's default transport keeps 2 per host: with sync's reconcile workers,
// feedback and gates calling GitHub at once, every connection beyond those
// was closed after one request and the next one paid a new TCP and TLS
// handshake (a twentieth of sync's CPU at 50 webhooks a second).
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
	obs := &observingTransport{next: base, obs: opts.Observer}
	var rt http.RoundTripper = obs
	if opts.Auth != nil {
		if rt, err = opts.Auth(rt, baseURL); err != nil {
			return nil, err
		}
	}
	entries := opts.CacheEntries
	if entries == 0 {
		entries = 10000
	}
	rt = newETagTransport(rt, entries)
	c := gh.NewClient(&http.Client{Transport: rt, Timeout: timeout})
	c.BaseURL = u
	c.UploadURL = u
	return &Provider{client: c, obs: obs, comments: map[string]commentRef{}}, nil
}

// RateLimit returns the remaining core rate limit and its reset time, as
// last announced by GitHub.
func (p *Provider) RateLimit() (int, time.Time) { return p.obs.rateLimit() }

func split(repository string) (string, string, error) {
	owner, name, ok := strings.Cut(repository, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q is not owner/name", repository)
	}
	return owner, name, nil
}

// before refuses calls while a rate limit announced by GitHub lasts.
func (p *Provider) before() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.blockedUntil) {
		return &provider.RateLimitError{Until: p.blockedUntil, Err: errors.New("not calling GitHub before the announced reset")}
	}
	return nil
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
		until = time.Now().Add(wait)
	case errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusTooManyRequests:
		wait := time.Minute
		if s, perr := strconv.Atoi(er.Response.Header.Get("Retry-After")); perr == nil {
			wait = time.Duration(s) * time.Second
		}
		until = time.Now().Add(wait)
	case errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %v", provider.ErrNotFound, err)
	default:
		return err
	}
	if until.Before(time.Now()) {
		until = time.Now().Add(time.Second)
	}
	p.mu.Lock()
	if until.After(p.blockedUntil) {
		p.blockedUntil = until
	}
	p.mu.Unlock()
	return &provider.RateLimitError{Until: until, Err: err}
}

// ListOpenPullRequests lists open pull requests, 100 per page, each page a
// conditional request.
func (p *Provider) ListOpenPullRequests(ctx context.Context, repository string) ([]provider.PullRequest, error) {
	owner, name, err := split(repository)
	if err != nil {
		return nil, err
	}
	opts := &gh.PullRequestListOptions{State: "open", ListOptions: gh.ListOptions{PerPage: 100}}
	var out []provider.PullRequest
	for {
		if err := p.before(); err != nil {
			return nil, err
		}
		prs, resp, err := p.client.PullRequests.List(ctx, owner, name, opts)
		if err := p.after(resp, err); err != nil {
			return nil, fmt.Errorf("list pull requests of %s: %w", repository, err)
		}
		for _, pr := range prs {
			out = append(out, convert(repository, pr))
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
}

// GetPullRequest reads one pull request.
func (p *Provider) GetPullRequest(ctx context.Context, repository string, number int) (provider.PullRequest, error) {
	owner, name, err := split(repository)
	if err != nil {
		return provider.PullRequest{}, err
	}
	if err := p.before(); err != nil {
		return provider.PullRequest{}, err
	}
	pr, resp, err := p.client.PullRequests.Get(ctx, owner, name, number)
	if err := p.after(resp, err); err != nil {
		return provider.PullRequest{}, fmt.Errorf("get pull request %s#%d: %w", repository, number, err)
	}
	return convert(repository, pr), nil
}

func convert(repository string, pr *gh.PullRequest) provider.PullRequest {
	out := provider.PullRequest{
		Repository: repository,
		Number:     pr.GetNumber(),
		State:      pr.GetState(),
		Merged:     pr.GetMerged() || pr.MergedAt != nil,
		Draft:      pr.GetDraft(),
		Title:      pr.GetTitle(),
		Author:     pr.GetUser().GetLogin(),
		HeadBranch: pr.GetHead().GetRef(),
		HeadSHA:    pr.GetHead().GetSHA(),
		BaseBranch: pr.GetBase().GetRef(),
		URL:        pr.GetHTMLURL(),
		CreatedAt:  pr.GetCreatedAt().Time,
		UpdatedAt:  pr.GetUpdatedAt().Time,
	}
	for _, l := range pr.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	return out
}

// FromEvent converts the pull request of a webhook payload.
func FromEvent(repository string, pr *gh.PullRequest) provider.PullRequest {
	return convert(repository, pr)
}

// GateState reads a check run (latest run of that name) or a status context
// on a commit.
func (p *Provider) GateState(ctx context.Context, repository, sha string, gate provider.Gate) (provider.GateState, string, error) {
	owner, name, err := split(repository)
	if err != nil {
		return "", "", err
	}
	if err := p.before(); err != nil {
		return "", "", err
	}
	short := sha
	if len(short) > 7 {
		short = short[:7]
	}
	if gate.CheckRun != "" {
		res, resp, err := p.client.Checks.ListCheckRunsForRef(ctx, owner, name, sha, &gh.ListCheckRunsOptions{
			CheckName: gh.String(gate.CheckRun), Filter: gh.String("latest"), ListOptions: gh.ListOptions{PerPage: 100},
		})
		if err := p.after(resp, err); err != nil {
			return "", "", fmt.Errorf("check runs of %s@%s: %w", repository, short, err)
		}
		return checkRunsState(res.CheckRuns, gate.CheckRun, short)
	}
	res, resp, err := p.client.Repositories.GetCombinedStatus(ctx, owner, name, sha, &gh.ListOptions{PerPage: 100})
	if err := p.after(resp, err); err != nil {
		return "", "", fmt.Errorf("statuses of %s@%s: %w", repository, short, err)
	}
	for _, st := range res.Statuses {
		if st.GetContext() != gate.StatusContext {
			continue
		}
		switch st.GetState() {
		case "success":
			return provider.GatePassed, fmt.Sprintf("status %s succeeded on %s", gate.StatusContext, short), nil
		case "failure", "error":
			return provider.GateFailed, fmt.Sprintf("status %s is %s on %s", gate.StatusContext, st.GetState(), short), nil
		}
		return provider.GatePending, fmt.Sprintf("waiting for status %s on %s", gate.StatusContext, short), nil
	}
	return provider.GatePending, fmt.Sprintf("waiting for status %s on %s", gate.StatusContext, short), nil
}

func checkRunsState(runs []*gh.CheckRun, name, short string) (provider.GateState, string, error) {
	state, reason := provider.GatePending, fmt.Sprintf("waiting for check run %s on %s", name, short)
	for _, r := range runs {
		if r.GetName() != name || r.GetStatus() != "completed" {
			continue
		}
		switch r.GetConclusion() {
		case "success":
			return provider.GatePassed, fmt.Sprintf("check run %s succeeded on %s", name, short), nil
		case "neutral", "skipped", "stale":
		default:
			state, reason = provider.GateFailed, fmt.Sprintf("check run %s concluded %s on %s", name, r.GetConclusion(), short)
		}
	}
	return state, reason, nil
}

// SetCommitStatus posts a commit status; the description is cut to GitHub's
// 140 characters.
func (p *Provider) SetCommitStatus(ctx context.Context, repository, sha string, st provider.CommitStatus) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	if err := p.before(); err != nil {
		return err
	}
	desc := st.Description
	if r := []rune(desc); len(r) > 140 {
		desc = string(r[:139]) + "…"
	}
	// A restarted sync does not repeat the status GitHub already shows:
	// the latest status of the context is read first (a conditional GET).
	latest, resp, err := p.client.Repositories.ListStatuses(ctx, owner, name, sha, &gh.ListOptions{PerPage: 100})
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("read commit statuses of %s@%s: %w", repository, sha, err)
	}
	for _, l := range latest { // newest first
		if l.GetContext() != st.Context {
			continue
		}
		if l.GetState() == st.State && l.GetDescription() == desc && l.GetTargetURL() == st.TargetURL {
			return nil
		}
		break
	}
	status := &gh.RepoStatus{State: gh.String(st.State), Context: gh.String(st.Context), Description: gh.String(desc)}
	if st.TargetURL != "" {
		status.TargetURL = gh.String(st.TargetURL)
	}
	_, resp, err = p.client.Repositories.CreateStatus(ctx, owner, name, sha, status)
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("set commit status %s on %s@%s: %w", st.Context, repository, sha, err)
	}
	return nil
}

// UpsertComment keeps exactly one comment carrying marker on the pull
// request: found once by listing the comments, then edited in place.
func (p *Provider) UpsertComment(ctx context.Context, repository string, number int, marker, body string) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	key := commentKey(repository, number)
	p.mu.Lock()
	ref, known := p.comments[key]
	p.mu.Unlock()
	if !known {
		opts := &gh.IssueListCommentsOptions{ListOptions: gh.ListOptions{PerPage: 100}}
		for {
			if err := p.before(); err != nil {
				return err
			}
			cs, resp, err := p.client.Issues.ListComments(ctx, owner, name, number, opts)
			if err := p.after(resp, err); err != nil {
				return fmt.Errorf("list comments of %s#%d: %w", repository, number, err)
			}
			for _, c := range cs {
				if strings.Contains(c.GetBody(), marker) && !known {
					ref, known = commentRef{id: c.GetID(), body: c.GetBody()}, true
				}
			}
			if resp.NextPage == 0 || known {
				break
			}
			opts.Page = resp.NextPage
		}
	}
	if known && ref.body == body {
		p.remember(key, ref)
		return nil
	}
	if err := p.before(); err != nil {
		return err
	}
	if known {
		c, resp, err := p.client.Issues.EditComment(ctx, owner, name, ref.id, &gh.IssueComment{Body: gh.String(body)})
		err = p.after(resp, err)
		if err == nil {
			p.remember(key, commentRef{id: c.GetID(), body: body})
			return nil
		}
		if !errors.Is(err, provider.ErrNotFound) {
			return fmt.Errorf("edit comment on %s#%d: %w", repository, number, err)
		}
		// Someone deleted our comment: write a new one.
	}
	c, resp, err := p.client.Issues.CreateComment(ctx, owner, name, number, &gh.IssueComment{Body: gh.String(body)})
	if err := p.after(resp, err); err != nil {
		return fmt.Errorf("create comment on %s#%d: %w", repository, number, err)
	}
	p.remember(key, commentRef{id: c.GetID(), body: body})
	return nil
}

func (p *Provider) remember(key string, ref commentRef) {
	p.mu.Lock()
	p.comments[key] = ref
	p.mu.Unlock()
}

func commentKey(repository string, number int) string {
	return fmt.Sprintf("%s#%d", strings.ToLower(repository), number)
}

// ForgetPullRequest implements provider.Forgetter: the comment of a
// pull request is found again by listing, should it be needed.
func (p *Provider) ForgetPullRequest(repository string, number int) {
	p.mu.Lock()
	delete(p.comments, commentKey(repository, number))
	p.mu.Unlock()
}

// ForgetRepository implements provider.Forgetter.
func (p *Provider) ForgetRepository(repository string) {
	prefix := strings.ToLower(repository) + "#"
	p.mu.Lock()
	for k := range p.comments {
		if strings.HasPrefix(k, prefix) {
			delete(p.comments, k)
		}
	}
	p.mu.Unlock()
}
