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
	"strings"

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
	set, err := forge.NewSetup("gitea", opts.BaseURL, opts.HTTPClient, opts.Token, opts.TokenFile, opts.Clock)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		baseURL:  strings.TrimSuffix(set.BaseURL.String(), "/"),
		http:     &http.Client{Transport: &forge.AuthTransport{Next: set.Transport, Scheme: "token", Token: set.Token}, Timeout: set.Timeout},
		clock:    set.Clock,
		blocker:  forge.NewBlocker(set.Clock, "not calling Gitea before the announced time"),
		comments: forge.NewComments(),
	}
	// A new token in the token file may be another user's.
	p.self.Credential = set.Token
	return p, nil
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

// after classifies an error as every provider does (forge.Blocker.Answer):
// 404 is provider.ErrNotFound, 429 a rate limit that blocks further calls.
func (p *Provider) after(resp *sdk.Response, err error) error {
	if err == nil {
		return nil
	}
	if resp == nil || resp.Response == nil {
		return err
	}
	return p.blocker.Answer(resp.StatusCode, resp.Header, err, false, nil)
}
