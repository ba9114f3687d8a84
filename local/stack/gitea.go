package stack

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"

	"github.com/petri-dev/petri/local/gitea"
)

// Forges the stack plays pull requests on (Options.Forge).
const (
	// ForgeGitHub is the GitHub API stand-in, the default.
	ForgeGitHub = "github"
	// ForgeGitea is a real Gitea server (make gitea builds it): the demo
	// application's repository is petri-dev/hello on it, and sync reads it
	// and reports to it through the Gitea provider.
	ForgeGitea = "gitea"
)

// GiteaForge is what the stack made on Gitea.
type GiteaForge struct {
	// Server is the Gitea; its administrator owns petri-dev.
	Server *gitea.Server
	// Sync is sync's identity on Gitea: an administrator of
	// petri-dev/hello. Its comments are sync's.
	Sync gitea.User
	// Writer may give /petri commands (write access); Stranger may not
	// (no access: anyone may read the public repository).
	Writer, Stranger gitea.User
	// WebhookSecret signs Gitea's deliveries to sync.
	WebhookSecret string
	// API stands between sync and Gitea, which cannot be told to fail:
	// sync's -gitea-url. Hooks stands between Gitea's webhook and sync's
	// endpoint: a fault there loses deliveries on the way.
	API, Hooks *FaultProxy
}

// startGitea starts Gitea and makes the demo's repository on it, its users
// and sync's identity; the webhook to sync is made once sync runs
// (hookGitea).
func (s *Stack) startGitea(r *Report) error {
	step := r.Begin("Gitea: a real Gitea server (bin/gitea), the demo's forge")
	srv, err := gitea.Start(gitea.Options{Dir: filepath.Join(s.opts.Dir, "gitea")})
	if err != nil {
		return step.Fail(err)
	}
	g := &GiteaForge{Server: srv, WebhookSecret: randomHex(32)}
	s.Gitea = g
	if g.API, err = NewFaultProxy(srv.URL); err != nil {
		return step.Fail(err)
	}
	owner, _, _ := strings.Cut(DemoRepository, "/")
	if err := srv.CreateOrg(owner); err != nil {
		return step.Fail(err)
	}
	if err := srv.CreateRepository(DemoRepository); err != nil {
		return step.Fail(err)
	}
	if _, err := srv.Push(DemoRepository, gitea.Commit{Branch: "main", Message: "The example application",
		Files: map[string]string{"README.md": "# hello\n\nThe example application's repository.\n"}}); err != nil {
		return step.Fail(err)
	}
	for _, u := range []struct {
		name, permission string
		into             *gitea.User
	}{{"petri-sync", "admin", &g.Sync}, {"alice", "write", &g.Writer}, {"mallory", "", &g.Stranger}} {
		if *u.into, err = srv.CreateUser(u.name); err != nil {
			return step.Fail(err)
		}
		if u.permission != "" {
			if err := srv.AddCollaborator(DemoRepository, u.name, u.permission); err != nil {
				return step.Fail(err)
			}
		}
	}
	step.Done(srv.URL)
	r.Event("Gitea: %s on %s; sync acts as %s (admin), %s may give commands (write), %s may not",
		DemoRepository, srv.URL, g.Sync.Name, g.Writer.Name, g.Stranger.Name)
	return nil
}

// hookGitea makes the repository's webhook to sync's Gitea endpoint.
// Gitea reaches sync through the Hooks proxy and the ingress on loopback,
// which its ALLOWED_HOST_LIST allows.
func (s *Stack) hookGitea(r *Report) error {
	step := r.Begin("Gitea webhook to petri-sync")
	hooks, err := NewFaultProxy(strings.Replace(s.IngressURL, "localhost", "127.0.0.1", 1))
	if err != nil {
		return step.Fail(err)
	}
	s.Gitea.Hooks = hooks
	url := hooks.URL + "/webhooks/" + ForgeGitea
	if _, err := s.Gitea.Server.CreateWebhook(DemoRepository, gitea.Webhook{URL: url, Secret: s.Gitea.WebhookSecret}); err != nil {
		return step.Fail(err)
	}
	step.Done(url)
	return nil
}

// giteaConfig names Gitea as the forge of the config repository's
// applications.
func giteaConfig(data []byte) []byte {
	return bytes.ReplaceAll(data, []byte("\nrepository: "), []byte("\nforge: gitea\nrepository: "))
}

// giteaArgs and giteaFiles are sync's flags and Secret files for Gitea:
// sync calls Gitea through the forge's FaultProxy.
func (s *Stack) giteaArgs() []string {
	return []string{
		"-gitea-url=" + s.Gitea.API.URL + "/",
		"-gitea-token-file=/etc/petri-sync/secrets/gitea-token",
		"-gitea-webhook-secret-file=/etc/petri-sync/secrets/gitea-webhook-secret",
	}
}

func (s *Stack) giteaFiles() map[string]string {
	return map[string]string{"gitea-token": s.Gitea.Sync.Token, "gitea-webhook-secret": s.Gitea.WebhookSecret}
}

// GiteaComments are the comments of a pull request on Gitea, as Gitea's
// API answers them.
func (g *GiteaForge) Comments(number int) ([]GiteaComment, error) {
	var out []GiteaComment
	err := g.Server.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/issues/%d/comments", DemoRepository, number), nil, &out)
	return out, err
}

// GiteaComment is one comment as Gitea's API answers it.
type GiteaComment struct {
	ID   int64  `json:"id"`
	Body string `json:"body"`
	User struct {
		Login string `json:"login"`
	} `json:"user"`
}

// GiteaStatus is one commit status as Gitea's API answers it.
type GiteaStatus struct {
	// ID grows with each status Gitea stores.
	ID          int64  `json:"id"`
	Context     string `json:"context"`
	State       string `json:"status"`
	Description string `json:"description"`
	TargetURL   string `json:"target_url"`
	Creator     struct {
		Login string `json:"login"`
	} `json:"creator"`
}

// Statuses are a commit's statuses, newest first. Gitea lists them by the
// second they were created in, and two statuses of one second in either
// order: the newest is the one stored last (the highest id), as Gitea's
// own combined status counts them.
func (g *GiteaForge) Statuses(sha string) ([]GiteaStatus, error) {
	var out []GiteaStatus
	err := g.Server.Call(nil, http.MethodGet, "/repos/"+DemoRepository+"/statuses/"+sha, nil, &out)
	slices.SortStableFunc(out, func(a, b GiteaStatus) int { return cmp.Compare(b.ID, a.ID) })
	return out, err
}

// Reactions are the reactions on a comment ("+1", "-1") by user.
func (g *GiteaForge) Reactions(commentID int64) (map[string]string, error) {
	var out []struct {
		Content string `json:"content"`
		User    struct {
			Login string `json:"login"`
		} `json:"user"`
	}
	if err := g.Server.Call(nil, http.MethodGet, fmt.Sprintf("/repos/%s/issues/comments/%d/reactions", DemoRepository, commentID), nil, &out); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, r := range out {
		m[r.User.Login] = r.Content
	}
	return m, nil
}
