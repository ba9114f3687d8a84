// Package gitlab is the GitLab (gitlab.com and self-managed) implementation
// of sync's three provider roles (pullrequests.go, reporter.go,
// deployments.go, commands.go), through gitlab.com/gitlab-org/api/client-go,
// and the reading of GitLab's webhooks (webhook.go).
//
// A repository is a project's full path, which may sit in nested groups
// (group/subgroup/project); the client escapes it as one path segment, the
// way GitLab's API wants it. A pull request is a merge request, its number
// the merge request's IID.
//
// The token's user is the provider's identity: the one note sync keeps on a
// merge request is only ever a note that user wrote. It needs the api scope
// and at least the Developer role on each project (commit statuses,
// deployments, notes, award emoji, reading members).
//
// The client's own retries and its own throttling are off: a 429, or an
// answer saying no request is left (RateLimit-Remaining: 0), stops every
// call until the time GitLab named (Retry-After, RateLimit-Reset), and each
// call fails with a *provider.RateLimitError meanwhile, as the GitHub and
// Gitea providers do; sync tries again on its next pass.
package gitlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go"
	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/provider"
	"github.com/petri-dev/petri/sync/provider/internal/forge"
)

// DefaultBaseURL is gitlab.com; a self-managed GitLab names its own.
const DefaultBaseURL = "https://gitlab.com/"

// DefaultFullListEvery is how often ListOpenPullRequests lists every open
// merge request rather than only those changed since its last listing: a
// merge request deleted outright (which changes nothing GitLab lists by
// updated_after) leaves the provider's list then at the latest.
const DefaultFullListEvery = time.Hour

// Options configure the GitLab provider.
type Options struct {
	// BaseURL is the server's root, such as https://gitlab.example.com/
	// (the API is under /api/v4; a URL already ending in /api/v4 is taken
	// as it is). DefaultBaseURL when empty.
	BaseURL string
	// HTTPClient supplies the transport (and its TLS settings) and the
	// timeout of each request; Go's default transport and no timeout when
	// nil.
	HTTPClient *http.Client
	// Token is a personal, group or project access token with the api
	// scope. TokenFile, when set, is read instead and read again when it
	// changes, so a rotated Secret takes effect without a restart.
	Token     string
	TokenFile string
	// Clock tells when an announced rate limit ends and when a full
	// listing is due; the real one when nil.
	Clock clock.PassiveClock
	// FullListEvery is how often the open merge requests are listed whole
	// instead of by updated_after; DefaultFullListEvery when zero.
	FullListEvery time.Duration
}

// Provider talks to one GitLab server as the token's user. It is the
// forge's roles side by side, each holding what it needs of the others: the
// merge requests and their gates (pullrequests.go), the reporter
// (reporter.go) and its deployments (deployments.go), the notes a command
// is read from and members' permissions (commands.go), and the label
// history (labels.go), all calling GitLab through one api.
type Provider struct {
	*api
	*mergeRequests
	*reporter
	*deployments
	*notes
	*members
	*labels
}

// api is how every role calls GitLab: the client, the refusal of calls
// while an announced rate limit lasts, the count of failed calls and the
// token's user.
type api struct {
	client *gl.Client
	clock  clock.PassiveClock

	blocker *forge.Blocker
	self    forge.Login
	// failures counts the calls GitLab failed (5xx, 429, 403, no answer):
	// a listing of what changed is trusted only when none failed since the
	// previous listing began.
	failures atomic.Int64
}

var (
	_ provider.PullRequestSource = (*Provider)(nil)
	_ provider.LabelHistory      = (*Provider)(nil)
	_ provider.Reporter          = (*Provider)(nil)
	_ provider.CommandReader     = (*Provider)(nil)
	_ provider.Forgetter         = (*Provider)(nil)
)

// New builds a provider. It calls nothing: the token's user is learnt on
// the first note written.
func New(opts Options) (*Provider, error) {
	base := opts.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	set, err := forge.NewSetup("gitlab", base, opts.HTTPClient, opts.Token, opts.TokenFile, opts.Clock)
	if err != nil {
		return nil, err
	}
	a := &api{clock: set.Clock, blocker: forge.NewBlocker(set.Clock, "not calling GitLab before the announced time")}
	// A new token in the token file may be another user's (a new project
	// access token is a new bot user).
	a.self.Credential = set.Token
	fullList := opts.FullListEvery
	if fullList <= 0 {
		fullList = DefaultFullListEvery
	}
	httpClient := &http.Client{Transport: &limitTransport{next: set.Transport, api: a}, Timeout: set.Timeout}
	a.client, err = gl.NewAuthSourceClient(tokenAuth{set.Token},
		gl.WithBaseURL(set.BaseURL.String()), gl.WithHTTPClient(httpClient), gl.WithoutRetries(),
		gl.WithCustomLimiter(noLimiter{}), gl.WithUserAgent("petri-sync"))
	if err != nil {
		return nil, fmt.Errorf("gitlab client: %w", err)
	}
	mrs := &mergeRequests{api: a, fullList: fullList, open: map[string]*openList{}}
	ns := &notes{api: a, byID: map[noteKey]int{}}
	p := &Provider{
		api:           a,
		mergeRequests: mrs,
		reporter:      &reporter{api: a, comments: forge.NewComments(), notes: ns},
		deployments:   &deployments{api: a, mrs: mrs},
		notes:         ns,
		members:       &members{api: a},
		labels:        &labels{api: a},
	}
	return p, nil
}

// tokenAuth gives each request the current token in GitLab's PRIVATE-TOKEN
// header, which every kind of access token is sent in.
type tokenAuth struct{ token func() (string, error) }

func (tokenAuth) Init(context.Context, *gl.Client) error { return nil }

func (a tokenAuth) Header(context.Context) (string, string, error) {
	tok, err := a.token()
	if err != nil {
		return "", "", err
	}
	return gl.AccessTokenHeaderName, tok, nil
}

// noLimiter never waits: the client would otherwise pace every call by the
// first answer's RateLimit-Limit, holding sync's workers; the provider
// refuses calls only while GitLab says none is left.
type noLimiter struct{}

func (noLimiter) Wait(context.Context) error { return nil }

// limitTransport reads GitLab's rate-limit headers on every answer: one
// saying no request is left stops calls until RateLimit-Reset.
type limitTransport struct {
	next http.RoundTripper
	api  *api
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode != http.StatusTooManyRequests && resp.Header.Get("RateLimit-Remaining") == "0" {
		if until, ok := t.api.resetTime(resp.Header); ok {
			_ = t.api.blocker.Block(until, errors.New("no request left"))
		}
	}
	return resp, err
}

// resetTime is when GitLab's RateLimit-Reset (Unix seconds) says the limit
// ends, when it is in the future.
func (a *api) resetTime(h http.Header) (time.Time, bool) {
	s, err := strconv.ParseInt(h.Get("RateLimit-Reset"), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	until := time.Unix(s, 0).UTC()
	return until, until.After(a.clock.Now())
}

// Self is the token's user, asked once (GET /api/v4/user): the author of
// every note sync writes, and so the only author whose note sync edits.
func (a *api) Self(ctx context.Context) (string, error) {
	return a.self.Get(ctx, a.tokenUser)
}

func (a *api) tokenUser(ctx context.Context) (string, error) {
	if err := a.before(); err != nil {
		return "", err
	}
	u, resp, err := a.client.Users.CurrentUser(gl.WithContext(ctx))
	if err := a.after(resp, err); err != nil {
		return "", fmt.Errorf("read the token's user: %w", err)
	}
	if u.Username == "" {
		return "", errors.New("read the token's user: gitlab answered no username")
	}
	return u.Username, nil
}

// project checks a repository is a project's full path: a namespace (a
// user, a group or nested groups) and a name, none of its parts empty. The
// client escapes it as GitLab wants (group%2Fsub%2Fproject).
func project(repository string) (string, error) {
	parts := strings.Split(repository, "/")
	if len(parts) < 2 {
		return "", fmt.Errorf("repository %q is not namespace/project", repository)
	}
	for _, part := range parts {
		if part == "" {
			return "", fmt.Errorf("repository %q is not namespace/project", repository)
		}
	}
	return repository, nil
}

// before refuses calls while a rate limit announced by GitLab lasts.
func (a *api) before() error { return a.blocker.Before() }

// after classifies an error by the answer's status: 404 is
// provider.ErrNotFound, 429 a rate limit that blocks further calls.
func (a *api) after(resp *gl.Response, err error) error {
	if err == nil {
		return nil
	}
	if resp == nil || resp.Response == nil {
		a.failures.Add(1)
		return err
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests {
		a.failures.Add(1)
	}
	return a.blocker.Answer(resp.StatusCode, resp.Header, err, false, a.resetTime)
}

// short is a commit's first seven characters, for people.
func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// repoKey is a repository as the provider remembers it: GitLab's paths
// are case-insensitive.
func repoKey(repository string) string { return strings.ToLower(repository) }
