package stack

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/petri-dev/petri/local/gitea"
)

// GiteaScenario plays the demo's pull request on the real Gitea (a stack
// started with Options.Forge ForgeGitea): a branch pushed with go-git, the
// pull request opened and labelled through Gitea's API, a push, a /petri
// command refused from a user without write access and honoured from one
// with it, the merge. After each step it reads back from Gitea what sync
// reported there (the commit status, the one comment, the reactions).
type GiteaScenario struct {
	Stack  *Stack
	Report *Report
	// StepTimeout bounds each step; three minutes when zero.
	StepTimeout time.Duration
	// Title is the pull request's title.
	Title string

	f forgeScenario
}

// GiteaResult is what the Gitea scenario observed: Petri's side
// (ForgeRun), and what it read back from Gitea.
type GiteaResult struct {
	ForgeRun
	// Statuses are sync's commit statuses read back from Gitea, one per
	// deployed commit, once Ready.
	Statuses []GiteaStatus
	// Comment is sync's one comment as Gitea has it, once Ready after the
	// push; SyncComments counts sync's comments then.
	Comment      string
	SyncComments int
	// Refused and Honoured are sync's reactions on the stranger's and the
	// writer's /petri redeploy.
	Refused, Honoured string
}

func (g *GiteaScenario) forge() *GiteaForge { return g.Stack.Gitea }

// Run plays the scenario; the error is the first step that did not reach
// its expected state.
func (g *GiteaScenario) Run(ctx context.Context) (*GiteaResult, error) {
	if g.Stack.Gitea == nil {
		return nil, fmt.Errorf("the stack was not started with forge %s", ForgeGitea)
	}
	g.f, g.StepTimeout = newForgeScenario(g.Stack, g.Report, g.StepTimeout)
	if g.Title == "" {
		g.Title = "Add a greeting"
	}
	res := &GiteaResult{}
	return res, g.f.play(ctx, []forgeStep{
		{"1. Open a pull request on Gitea", func(ctx context.Context) error { return g.open(ctx, res) }},
		{"2. Push a new commit", func(ctx context.Context) error { return g.push(ctx, res) }},
		{"3. /petri redeploy: refused from a stranger, honoured from a writer", func(ctx context.Context) error { return g.command(ctx, res) }},
		{"4. Merge the pull request", func(ctx context.Context) error { return g.merge(ctx, res) }},
	})
}

func (g *GiteaScenario) open(ctx context.Context, res *GiteaResult) error {
	srv, r := g.forge().Server, g.Report
	sha, err := srv.Push(DemoRepository, gitea.Commit{Branch: g.f.branch, Files: map[string]string{"greeting.txt": "Hello\n"}, Message: g.Title})
	if err != nil {
		return err
	}
	r.Event("git push (go-git) of %s to %s/%s.git: %s", g.f.branch, srv.URL, DemoRepository, short(sha))
	if res.Number, err = srv.OpenPullRequest(DemoRepository, gitea.PullRequest{Head: g.f.branch, Title: g.Title}); err != nil {
		return err
	}
	if err := srv.AddLabels(DemoRepository, res.Number, DemoLabel); err != nil {
		return err
	}
	r.Event("Gitea: pull request #%d %q opened on %s through Gitea's API, label %q", res.Number, g.Title, DemoRepository, DemoLabel)
	return g.deployed(ctx, res, sha, "Ready")
}

func (g *GiteaScenario) push(ctx context.Context, res *GiteaResult) error {
	sha, err := g.forge().Server.Push(DemoRepository, gitea.Commit{Branch: g.f.branch, Files: map[string]string{"greeting.txt": "Hello again\n"}, Message: "Greet again"})
	if err != nil {
		return err
	}
	g.Report.Event("git push of a new commit to %s: %s", g.f.branch, short(sha))
	return g.deployed(ctx, res, sha, "`"+short(sha)+"`")
}

// deployed waits until sha is deployed (see forgeScenario.deployed) and
// Gitea shows sync's success status on it and its comment saying what.
func (g *GiteaScenario) deployed(ctx context.Context, res *GiteaResult, sha, what string) error {
	if _, err := g.f.deployed(ctx, &res.ForgeRun, sha); err != nil {
		return err
	}
	st, err := g.waitStatus(ctx, sha)
	if err != nil {
		return err
	}
	res.Statuses = append(res.Statuses, st)
	res.Comment, err = g.waitComment(ctx, res, what)
	return err
}

func (g *GiteaScenario) command(ctx context.Context, res *GiteaResult) error {
	f, r := g.forge(), g.Report
	var err error
	if res.Refused, _, err = g.commandAs(ctx, res, f.Stranger); err != nil {
		return err
	}
	r.Event("%s (no write access): sync reacted %s", f.Stranger.Name, res.Refused)
	var id int64
	if res.Honoured, id, err = g.commandAs(ctx, res, f.Writer); err != nil {
		return err
	}
	r.Event("%s (write access): sync reacted %s", f.Writer.Name, res.Honoured)
	return g.f.redeployed(ctx, &res.ForgeRun, id)
}

// commandAs writes /petri redeploy as a user and returns sync's reaction
// on it and the comment's id.
func (g *GiteaScenario) commandAs(ctx context.Context, res *GiteaResult, u gitea.User) (string, int64, error) {
	f := g.forge()
	cid, err := f.Server.Comment(&u, DemoRepository, res.Number, "/petri redeploy")
	if err != nil {
		return "", 0, err
	}
	g.Report.Event("%s commented /petri redeploy on #%d", u.Name, res.Number)
	var reaction string
	err = poll(ctx, g.StepTimeout, func() (bool, error) {
		rs, err := f.Reactions(cid)
		reaction = rs[f.Sync.Name]
		return err == nil && reaction != "", nil
	}, func() string { return "sync left no reaction on comment " + fmt.Sprint(cid) })
	return reaction, cid, err
}

func (g *GiteaScenario) merge(ctx context.Context, res *GiteaResult) error {
	if err := g.forge().Server.MergePullRequest(DemoRepository, res.Number); err != nil {
		return err
	}
	g.Report.Event("Gitea: pull request #%d merged", res.Number)
	if err := g.f.gone(ctx, &res.ForgeRun); err != nil {
		return err
	}
	body, err := g.waitComment(ctx, res, "deleted")
	if err == nil {
		res.Comment = body
	}
	return err
}

// waitStatus waits until sync's commit status on a commit, read back from
// Gitea, is success.
func (g *GiteaScenario) waitStatus(ctx context.Context, sha string) (GiteaStatus, error) {
	f := g.forge()
	var got GiteaStatus
	err := poll(ctx, g.StepTimeout, func() (bool, error) {
		sts, err := f.Statuses(sha)
		if err != nil || len(sts) == 0 {
			return false, nil
		}
		// Newest first.
		got = sts[0]
		return got.Creator.Login == f.Sync.Name && got.State == "success", nil
	}, func() string { return fmt.Sprintf("Gitea's latest status on %s is %+v", short(sha), got) })
	if err == nil {
		g.Report.Event("Gitea: commit status %q %s on %s by %s: %s (%s)", got.Context, got.State, short(sha), got.Creator.Login, got.Description, got.TargetURL)
	}
	return got, err
}

// waitComment waits until sync's one comment, read back from Gitea, says
// what; it counts sync's comments into res.
func (g *GiteaScenario) waitComment(ctx context.Context, res *GiteaResult, what string) (string, error) {
	f := g.forge()
	var body string
	err := poll(ctx, g.StepTimeout, func() (bool, error) {
		cs, err := f.Comments(res.Number)
		if err != nil {
			return false, nil
		}
		mine := slices.DeleteFunc(cs, func(c GiteaComment) bool { return c.User.Login != f.Sync.Name })
		res.SyncComments = len(mine)
		if len(mine) == 0 {
			return false, nil
		}
		body = mine[0].Body
		return strings.Contains(body, what), nil
	}, func() string { return fmt.Sprintf("sync's comment does not say %q: %s", what, body) })
	if err == nil {
		g.Report.Event("Gitea: sync's comment on #%d (%d of its own), read back:", res.Number, res.SyncComments)
		g.Report.Detail(body)
	}
	return body, err
}

// WriteGiteaSummary prints what the Gitea scenario read back from Gitea.
func WriteGiteaSummary(w io.Writer, res *GiteaResult, err error) {
	fmt.Fprintln(w)
	if res != nil {
		fmt.Fprintf(w, "Gitea pull request #%d -> environment %s (namespace %s)\n", res.Number, res.Environment, res.Namespace)
		for i, s := range res.Statuses {
			fmt.Fprintf(w, "  commit %s: Gitea's status %q is %s, by %s: %s\n", short(res.SHAs[i]), s.Context, s.State, s.Creator.Login, s.TargetURL)
		}
		fmt.Fprintf(w, "  release revisions: %v; /petri redeploy: stranger %s, writer %s; sync's comments: %d\n", res.Revisions, res.Refused, res.Honoured, res.SyncComments)
	}
	if err != nil {
		fmt.Fprintf(w, "FAILED: %v\n", err)
		return
	}
	fmt.Fprintln(w, "Every step reached its expected state on Gitea.")
}
