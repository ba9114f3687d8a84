// Package gitea is the Gitea (and Forgejo, which speaks Gitea's API)
// implementation of sync's three provider roles (pullrequests.go,
// reporter.go, commands.go), through code.gitea.io/sdk/gitea, and the
// reading of Gitea's webhooks (webhook.go).
//
// Gitea lacks two things GitHub has, and says so with errors wrapping
// errors.ErrUnsupported rather than pretending: check runs (a gate names a
// commit status context; Gitea Actions reports its jobs as commit statuses)
// and the Deployments API (ErrNoDeployments).
//
// The token's user is the provider's identity: it must be an administrator
// of each repository (Gitea shows another user's permission only to a
// repository administrator or a site administrator), and the one comment
// sync keeps on a pull request is only ever a comment that user wrote.
package gitea

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	sdk "code.gitea.io/sdk/gitea"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/provider/internal/forge"
)

// ErrNoDeployments is returned by the deployment methods of the reporter:
// Gitea has no Deployments API (no deployments, no deployment statuses, no
// environments), so sync's environment URL reaches people through the
// commit status's target URL and the comment instead.
var ErrNoDeployments = fmt.Errorf("gitea has no deployments API: %w", errors.ErrUnsupported)

// ErrNoCheckRuns is returned by GateState for a gate naming a check run:
// Gitea has commit statuses only (its Actions report each job as a commit
// status), so a Gitea gate names a status context.
var ErrNoCheckRuns = fmt.Errorf("gitea has no check runs, only commit statuses: %w", errors.ErrUnsupported)

// Options configure the Gitea provider.
type Options struct {
	// BaseURL is the server's root, such as https://gitea.example.com/ (the
	// API is under /api/v1). Required.
	BaseURL string
	// HTTPClient supplies the transport and the timeout of each request;
	// http.DefaultClient's transport and no timeout when nil.
	HTTPClient *http.Client
	// Token is an access token. TokenFile, when set, is read instead and
	// read again when it changes, so a rotated Secret takes effect without
	// a restart.
	Token     string
	TokenFile string
	// Clock tells when an announced rate limit ends; the real one when
	// nil.
	Clock clock.PassiveClock
}

// Provider talks to one Gitea server as the token's user.
type Provider struct {
	baseURL string
	http    *http.Client
	clock   clock.PassiveClock

	blocker  *forge.Blocker
	self     forge.Login
	comments *forge.Comments
}

var (
	_ provider.PullRequestSource = (*Provider)(nil)
	_ provider.Reporter          = (*Provider)(nil)
	_ provider.CommandReader     = (*Provider)(nil)
	_ provider.Forgetter         = (*Provider)(nil)
)

// New builds a provider. It calls nothing: the token's user is learnt on
// the first comment written.
func New(opts Options) (*Provider, error) {
	u, err := url.Parse(opts.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gitea base url %q: must be an http(s) URL", opts.BaseURL)
	}
	base := http.DefaultTransport
	timeout := time.Duration(0)
	if opts.HTTPClient != nil {
		if opts.HTTPClient.Transport != nil {
			base = opts.HTTPClient.Transport
		}
		timeout = opts.HTTPClient.Timeout
	}
	tok := tokenSource(strings.TrimSpace(opts.Token), opts.TokenFile)
	if _, err := tok(); err != nil {
		return nil, err
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Provider{
		baseURL:  strings.TrimSuffix(u.String(), "/"),
		http:     &http.Client{Transport: &forge.AuthTransport{Next: base, Scheme: "token", Token: tok}, Timeout: timeout},
		clock:    clk,
		blocker:  forge.NewBlocker(clk, "not calling Gitea before the announced time"),
		comments: forge.NewComments(),
	}, nil
}

// tokenSource is the token of each request: the file's, read again when it
// changes (the given token until the file is first read), else the given
// one. The token is never logged.
func tokenSource(tok, path string) func() (string, error) {
	if path != "" {
		return forge.NewTokenFile("gitea", path, tok).Token
	}
	return func() (string, error) {
		if tok == "" {
			return "", errors.New("gitea token: neither a token nor a token file given")
		}
		return tok, nil
	}
}

// api is a client for one call. The SDK's client carries one context for
// all its calls, so each call gets its own client, sharing the HTTP client
// (and its connections). The server's version is not asked: the SDK's
// workarounds for Gitea older than 1.14 are not needed.
func (p *Provider) api(ctx context.Context) (*sdk.Client, error) {
	if err := p.before(); err != nil {
		return nil, err
	}
	return sdk.NewClient(p.baseURL, sdk.SetHTTPClient(p.http), sdk.SetContext(ctx), sdk.SetGiteaVersion(""),
		sdk.SetUserAgent("petri-sync"))
}

// Self is the token's user, asked once (GET /api/v1/user).
func (p *Provider) Self(ctx context.Context) (string, error) {
	return p.self.Get(ctx, p.tokenUser)
}

// tokenUser asks Gitea whose token the provider holds.
func (p *Provider) tokenUser(ctx context.Context) (string, error) {
	c, err := p.api(ctx)
	if err != nil {
		return "", err
	}
	u, resp, err := c.GetMyUserInfo()
	if err := p.after(resp, err); err != nil {
		return "", fmt.Errorf("read the token's user: %w", err)
	}
	if u.UserName == "" {
		return "", errors.New("read the token's user: gitea answered no login")
	}
	return u.UserName, nil
}

var split = forge.SplitRepository

// before refuses calls while a rate limit announced by Gitea (or a proxy
// in front of it) lasts.
func (p *Provider) before() error { return p.blocker.Before() }

// after classifies an error by the answer's status: 404 is
// provider.ErrNotFound, 429 (with Retry-After, a minute without) a rate
// limit that blocks further calls.
func (p *Provider) after(resp *sdk.Response, err error) error {
	if err == nil {
		return nil
	}
	if resp == nil || resp.Response == nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return fmt.Errorf("%w: %v", provider.ErrNotFound, err)
	case http.StatusTooManyRequests:
		wait := time.Minute
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return p.blocker.Block(p.clock.Now().Add(wait), err)
	}
	return fmt.Errorf("%d: %w", resp.StatusCode, err)
}
