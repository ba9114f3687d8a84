package chaos

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/petri-dev/petri/local/gitea"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/local/stack"
)

// The applications of scenario 5 on the forges beside GitHub, on the
// repositories the stack made there.
const (
	chaosGiteaApp  = "chaos-gitea"
	chaosGitLabApp = "chaos-gitlab"
)

// Forges are the forges beside GitHub the suite's stack serves
// (stack.Options.Forges): scenarios 5 and 8 play on each.
var Forges = []string{stack.ForgeGitea, stack.ForgeGitLab}

// forge is one forge as scenario 5 plays on it: how a pull request is
// opened and closed there, and how its API is made to fail.
type forge struct {
	name string
	app  string
	// open opens a labelled pull request, its webhook delivered; it
	// returns its number.
	open func(ctx context.Context, title string) (int, error)
	// head is a pull request's head commit on the forge.
	head func(n int) string
	// loseHooks makes the forge's webhooks get lost (true) or reach sync
	// again (false).
	loseHooks func(bool)
	// close closes a pull request (its webhook goes, or is lost).
	close func(ctx context.Context, n int) error
	// closed tells whether a pull request is closed on the forge.
	closed func(n int) bool
	// phases are the ways its API fails; listing selects the open pull
	// requests' listing, one per resync round.
	phases  []outagePhase
	listing func(*http.Request) bool
	// setFault installs a fault that counts the listings into n; nil
	// clears it.
	setFault func(p *outagePhase, n *atomic.Int64)
}

// forgesUnderTest are GitHub and the forges beside it the stack serves.
func (r *run) forgesUnderTest() []*forge {
	out := []*forge{r.githubForge()}
	if r.st.Gitea != nil {
		out = append(out, r.giteaForge())
	}
	if r.st.GitLab != nil {
		out = append(out, r.gitlabForge())
	}
	return out
}

func (r *run) githubForge() *forge {
	st := r.st
	return &forge{
		name: "GitHub", app: chaosApplication,
		open: func(ctx context.Context, title string) (int, error) {
			pr, err := st.OpenPullRequest(ctx, 0, title)
			return pr.Number, err
		},
		head:      func(n int) string { pr, _ := st.PullRequest(n); return pr.HeadSHA },
		loseHooks: func(bool) {},
		close: func(ctx context.Context, n int) error {
			_, err := st.ClosePullRequest(ctx, n)
			return err
		},
		closed: func(n int) bool { pr, ok := st.PullRequest(n); return ok && pr.State == "closed" },
		phases: outagePhases(),
		setFault: func(p *outagePhase, n *atomic.Int64) {
			if p == nil {
				st.GitHub.SetFault(nil)
				return
			}
			st.GitHub.SetFault(counted(p.fault, n))
		},
	}
}

// closeQuietly closes a GitHub pull request on the stand-in without its
// webhook.
func (f *forge) closeQuietly(ctx context.Context, st *stack.Stack, n int) error {
	if f.app == chaosApplication {
		st.GitHub.UpdatePullRequest(stack.DemoRepository, n, func(p *githubapi.PullRequest) { p.State = "closed" })
		return nil
	}
	f.loseHooks(true)
	defer f.loseHooks(false)
	return f.close(ctx, n)
}

// proxyPhases are the ways a forge behind a stack.FaultProxy fails, as
// GitHub's do: 500, timeouts, 429 with Retry-After (and 403 with it on
// Gitea, which a proxy in front of it may send), a truncated listing with
// every other call failing, and 404 for the pull requests not listed.
func proxyPhases(name string, listing, readPR func(*http.Request) bool) []outagePhase {
	rate := &stack.Fault{Status: http.StatusTooManyRequests, RetryAfter: 2 * time.Second}
	phases := []outagePhase{
		{"500", nil, &stack.Fault{Status: http.StatusInternalServerError}},
		{"timeout", nil, &stack.Fault{Delay: forgeTimeout + 2*time.Second}},
		{"429 with Retry-After", nil, rate},
	}
	if name == "Gitea" {
		phases = append(phases, outagePhase{"403 with Retry-After", nil, &stack.Fault{Status: http.StatusForbidden, RetryAfter: 2 * time.Second}})
	}
	// As GitHub's listing of open pull requests does, the listing leaves
	// out the pull requests closed during the outage (GitLab's listing of
	// what changed would name them closed), and reading them answers 404.
	notFound := &stack.Fault{Status: http.StatusNotFound, Match: readPR, Rewrite: func(r *http.Request) {
		if q := r.URL.Query(); listing(r) && q.Get("state") == "all" {
			q.Set("state", "opened")
			r.URL.RawQuery = q.Encode()
		}
	}}
	return append(phases,
		outagePhase{"truncated listing", nil, &stack.Fault{EmptyList: listing, Status: http.StatusInternalServerError}},
		outagePhase{"404 for a pull request", nil, notFound},
	)
}

// proxied installs a phase's fault in a proxy, counting listings.
func proxied(p *stack.FaultProxy, listing func(*http.Request) bool) func(*outagePhase, *atomic.Int64) {
	return func(ph *outagePhase, n *atomic.Int64) {
		if ph == nil {
			p.SetFault(nil)
			p.Watch(nil)
			return
		}
		p.Watch(func(r *http.Request) {
			if listing(r) {
				n.Add(1)
			}
		})
		p.SetFault(ph.proxy)
	}
}

func (r *run) giteaForge() *forge {
	g := r.st.Gitea
	base := "/api/v1/repos/" + stack.DemoRepository + "/pulls"
	readPR := regexp.MustCompile(`^` + regexp.QuoteMeta(base) + `/\d+$`)
	listing := func(q *http.Request) bool { return q.Method == http.MethodGet && q.URL.Path == base }
	get := func(q *http.Request) bool { return q.Method == http.MethodGet && readPR.MatchString(q.URL.Path) }
	var branch atomic.Int64
	f := &forge{
		name: "Gitea", app: chaosGiteaApp, listing: listing,
		open: func(ctx context.Context, title string) (int, error) {
			b := fmt.Sprintf("chaos/%d-%d", time.Now().UnixNano()%100000, branch.Add(1))
			if _, err := g.Server.Push(stack.DemoRepository, gitea.Commit{Branch: b, Files: map[string]string{"chaos.txt": title}}); err != nil {
				return 0, err
			}
			n, err := g.Server.OpenPullRequest(stack.DemoRepository, gitea.PullRequest{Head: b, Title: title})
			if err != nil {
				return 0, err
			}
			return n, g.Server.AddLabels(stack.DemoRepository, n, stack.DemoLabel)
		},
		head: func(n int) string { pr, _ := giteaPull(g, n); return pr.Head.SHA },
		loseHooks: func(lose bool) {
			if lose {
				g.Hooks.SetFault(&stack.Fault{Status: http.StatusServiceUnavailable})
				return
			}
			g.Hooks.SetFault(nil)
		},
		close: func(_ context.Context, n int) error {
			return g.Server.Call(nil, http.MethodPatch, fmt.Sprintf("/repos/%s/pulls/%d", stack.DemoRepository, n), map[string]string{"state": "closed"}, nil)
		},
		closed:   func(n int) bool { pr, err := giteaPull(g, n); return err == nil && pr.State == "closed" },
		setFault: proxied(g.API, listing),
	}
	f.phases = proxyPhases(f.name, listing, get)
	return f
}

// giteaPullRequest is what the suite reads of a pull request on Gitea.
type giteaPullRequest struct {
	State string `json:"state"`
	Head  struct {
		SHA string `json:"sha"`
	} `json:"head"`
}

func giteaPull(g *stack.GiteaForge, n int) (giteaPullRequest, error) {
	var pr giteaPullRequest
	err := g.Server.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/pulls/%d", stack.DemoRepository, n), nil, &pr)
	return pr, err
}

func (r *run) gitlabForge() *forge {
	g := r.st.GitLab
	base := "/api/v4/projects/" + stack.GitLabProject + "/merge_requests"
	readPR := regexp.MustCompile(`^` + regexp.QuoteMeta(base) + `/\d+$`)
	listing := func(q *http.Request) bool { return q.Method == http.MethodGet && q.URL.Path == base }
	get := func(q *http.Request) bool { return q.Method == http.MethodGet && readPR.MatchString(q.URL.Path) }
	var next atomic.Int64
	f := &forge{
		name: "GitLab", app: chaosGitLabApp, listing: listing,
		open: func(_ context.Context, title string) (int, error) {
			i := next.Add(1)
			return g.Server.OpenMergeRequest(stack.GitLabProject, gitlabapi.MergeRequest{Title: title,
				SourceBranch: fmt.Sprintf("chaos/%d", i), SHA: fmt.Sprintf("%040x", time.Now().UnixNano()+i),
				Labels: []string{stack.DemoLabel}, Author: g.Developer}), nil
		},
		head:      func(n int) string { mr, _ := g.Server.MergeRequest(stack.GitLabProject, n); return mr.SHA },
		loseHooks: g.Server.MuteHooks,
		close: func(_ context.Context, n int) error {
			g.Server.UpdateMergeRequest(stack.GitLabProject, n, func(mr *gitlabapi.MergeRequest) { mr.State = "closed" })
			return nil
		},
		closed: func(n int) bool {
			mr, ok := g.Server.MergeRequest(stack.GitLabProject, n)
			return ok && mr.State != "opened"
		},
		setFault: proxied(g.API, listing),
	}
	f.phases = proxyPhases(f.name, listing, get)
	return f
}

// closedOn tells whether a pull request of a repository on a forge is
// closed there: what the recorder justifies a deletion by.
func (r *run) closedOn(forgeName, repository string, n int) bool {
	switch forgeName {
	case "", "github":
		if repository == "" {
			repository = stack.DemoRepository
		}
		if strings.EqualFold(repository, stack.DemoRepository) {
			if pr, ok := r.st.PullRequest(n); ok {
				return pr.State == "closed"
			}
		}
		pr, ok := r.st.GitHub.LookupPullRequest(repository, n)
		return ok && pr.State == "closed"
	case stack.ForgeGitea:
		if r.st.Gitea == nil {
			return false
		}
		var pr giteaPullRequest
		err := r.st.Gitea.Server.Call(nil, http.MethodGet, "/repos/"+repository+"/pulls/"+strconv.Itoa(n), nil, &pr)
		return err == nil && pr.State == "closed"
	case stack.ForgeGitLab:
		if r.st.GitLab == nil {
			return false
		}
		mr, ok := r.st.GitLab.Server.MergeRequest(repository, n)
		return ok && mr.State != "opened"
	}
	return false
}
