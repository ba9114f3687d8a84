package stack

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/petri-dev/petri/local/gitlabapi"
)

// GitLabScenario plays the demo's pull request as a merge request on the
// GitLab stand-in (a stack started with Options.Forge ForgeGitLab): opened
// with the trigger label, a push (a push hook and the merge request's
// update hook with oldrev, then a pipeline), a /petri redeploy note
// refused from a Guest and honoured from a Developer, the merge. Every
// step reaches sync as the stand-in's hooks, and after each it reads back
// from the stand-in what sync reported there (the commit status, the one
// note, the award emoji).
type GitLabScenario struct {
	Stack  *Stack
	Report *Report
	// StepTimeout bounds each step; three minutes when zero.
	StepTimeout time.Duration
	// Title is the merge request's title.
	Title string

	f forgeScenario
}

// GitLabResult is what the GitLab scenario observed: Petri's side
// (ForgeRun; Number is the merge request's IID), and what it read back
// from the stand-in.
type GitLabResult struct {
	ForgeRun
	// Statuses are sync's latest commit status on each deployed commit,
	// read back from the stand-in once Ready.
	Statuses []gitlabapi.CommitStatus
	// Note is sync's one note once Ready after the push, then once the
	// environment is gone; SyncNotes counts sync's notes.
	Note      string
	SyncNotes int
	// Refused and Honoured are sync's award emoji on the Guest's and the
	// Developer's /petri redeploy.
	Refused, Honoured string
	// Written are how long the open and the push took from the hook's
	// delivery to the environment written for the commit.
	Written []time.Duration
}

func (g *GitLabScenario) forge() *GitLabForge { return g.Stack.GitLab }

// Run plays the scenario; the error is the first step that did not reach
// its expected state.
func (g *GitLabScenario) Run(ctx context.Context) (*GitLabResult, error) {
	if g.Stack.GitLab == nil {
		return nil, fmt.Errorf("the stack was not started with forge %s", ForgeGitLab)
	}
	g.f, g.StepTimeout = newForgeScenario(g.Stack, g.Report, g.StepTimeout)
	if g.Title == "" {
		g.Title = "Add a greeting"
	}
	res := &GitLabResult{}
	return res, g.f.play(ctx, []forgeStep{
		{"1. Open a merge request on GitLab", func(ctx context.Context) error { return g.open(ctx, res) }},
		{"2. Push a new commit", func(ctx context.Context) error { return g.push(ctx, res) }},
		{"3. /petri redeploy: refused from a Guest, honoured from a Developer", func(ctx context.Context) error { return g.command(ctx, res) }},
		{"4. Merge the merge request", func(ctx context.Context) error { return g.merge(ctx, res) }},
	})
}

func (g *GitLabScenario) open(ctx context.Context, res *GitLabResult) error {
	f := g.forge()
	sha := randomHex(20)
	start := time.Now()
	res.Number = f.Server.OpenMergeRequest(GitLabProject, gitlabapi.MergeRequest{Title: g.Title, SourceBranch: g.f.branch,
		SHA: sha, Labels: []string{DemoLabel}, Author: f.Developer})
	g.Report.Event("GitLab: merge request !%d %q opened on %s by %s, label %q (merge request hook: open)", res.Number, g.Title, GitLabProject, f.Developer, DemoLabel)
	return g.deployed(ctx, res, sha, start, "Ready")
}

func (g *GitLabScenario) push(ctx context.Context, res *GitLabResult) error {
	f := g.forge()
	sha := randomHex(20)
	start := time.Now()
	f.Server.Push(GitLabProject, g.f.branch, sha, f.Developer)
	f.Server.AddPipeline(GitLabProject, gitlabapi.Pipeline{SHA: sha, Ref: g.f.branch, Status: "success",
		Jobs: []gitlabapi.Job{{Name: "test", Status: "success"}}})
	g.Report.Event("git push of a new commit to %s: %s (push hook, merge request hook: update with oldrev, pipeline hook: success)", g.f.branch, short(sha))
	return g.deployed(ctx, res, sha, start, "`"+short(sha)+"`")
}

// deployed waits until sha is deployed (see forgeScenario.deployed) and
// GitLab shows sync's success status on it and its note saying note.
func (g *GitLabScenario) deployed(ctx context.Context, res *GitLabResult, sha string, start time.Time, note string) error {
	written, err := g.f.deployed(ctx, &res.ForgeRun, sha)
	if err != nil {
		return err
	}
	res.Written = append(res.Written, written.Sub(start))
	st, err := g.waitStatus(ctx, sha)
	if err != nil {
		return err
	}
	res.Statuses = append(res.Statuses, st)
	res.Note, err = g.waitNote(ctx, res, note)
	return err
}

func (g *GitLabScenario) command(ctx context.Context, res *GitLabResult) error {
	f := g.forge()
	var err error
	if res.Refused, _, err = g.commandAs(ctx, res, f.Guest); err != nil {
		return err
	}
	g.Report.Event("%s (Guest): sync awarded %s", f.Guest, res.Refused)
	var id int64
	if res.Honoured, id, err = g.commandAs(ctx, res, f.Developer); err != nil {
		return err
	}
	g.Report.Event("%s (Developer): sync awarded %s", f.Developer, res.Honoured)
	return g.f.redeployed(ctx, &res.ForgeRun, id)
}

// commandAs writes /petri redeploy as a user and returns sync's award
// emoji on it and the note's id.
func (g *GitLabScenario) commandAs(ctx context.Context, res *GitLabResult, user string) (string, int64, error) {
	f := g.forge()
	id := f.Server.AddNote(GitLabProject, res.Number, user, "/petri redeploy")
	g.Report.Event("%s wrote /petri redeploy on !%d (note hook)", user, res.Number)
	var award string
	err := poll(ctx, g.StepTimeout, func() (bool, error) {
		award = f.Award(id)
		return award != "", nil
	}, func() string { return fmt.Sprintf("sync awarded no emoji on note %d", id) })
	return award, id, err
}

func (g *GitLabScenario) merge(ctx context.Context, res *GitLabResult) error {
	g.forge().Server.UpdateMergeRequest(GitLabProject, res.Number, func(mr *gitlabapi.MergeRequest) { mr.State = "merged" })
	g.Report.Event("GitLab: merge request !%d merged (merge request hook: merge)", res.Number)
	if err := g.f.gone(ctx, &res.ForgeRun); err != nil {
		return err
	}
	body, err := g.waitNote(ctx, res, "deleted")
	if err == nil {
		res.Note = body
	}
	return err
}

// waitStatus waits until sync's latest commit status on a commit, read
// back from the stand-in, is success.
func (g *GitLabScenario) waitStatus(ctx context.Context, sha string) (gitlabapi.CommitStatus, error) {
	var got gitlabapi.CommitStatus
	err := poll(ctx, g.StepTimeout, func() (bool, error) {
		sts := g.forge().Server.CommitStatuses(GitLabProject, sha)
		if len(sts) == 0 {
			return false, nil
		}
		got = sts[len(sts)-1]
		return got.Status == "success", nil
	}, func() string { return fmt.Sprintf("GitLab's latest status on %s is %+v", short(sha), got) })
	if err == nil {
		g.Report.Event("GitLab: commit status %q %s on %s: %s (%s)", got.Name, got.Status, short(sha), got.Description, got.TargetURL)
	}
	return got, err
}

// waitNote waits until sync's one note, read back from the stand-in, says
// what; it counts sync's notes into res.
func (g *GitLabScenario) waitNote(ctx context.Context, res *GitLabResult, what string) (string, error) {
	var body string
	err := poll(ctx, g.StepTimeout, func() (bool, error) {
		mine := g.forge().SyncNotes(res.Number)
		res.SyncNotes = len(mine)
		if len(mine) == 0 {
			return false, nil
		}
		body = mine[0].Body
		return strings.Contains(body, what), nil
	}, func() string { return fmt.Sprintf("sync's note does not say %q: %s", what, body) })
	if err == nil {
		g.Report.Event("GitLab: sync's note on !%d (%d of its own), read back:", res.Number, res.SyncNotes)
		g.Report.Detail(body)
	}
	return body, err
}

// WriteGitLabSummary prints what the GitLab scenario read back from the
// stand-in.
func WriteGitLabSummary(w io.Writer, res *GitLabResult, err error) {
	fmt.Fprintln(w)
	if res != nil {
		fmt.Fprintf(w, "GitLab merge request !%d of %s -> environment %s (namespace %s)\n", res.Number, GitLabProject, res.Environment, res.Namespace)
		for i, s := range res.Statuses {
			fmt.Fprintf(w, "  commit %s: GitLab's status %q is %s: %s\n", short(res.SHAs[i]), s.Name, s.Status, s.TargetURL)
		}
		fmt.Fprintf(w, "  release revisions: %v; /petri redeploy: Guest %s, Developer %s; sync's notes: %d\n", res.Revisions, res.Refused, res.Honoured, res.SyncNotes)
	}
	if err != nil {
		fmt.Fprintf(w, "FAILED: %v\n", err)
		return
	}
	fmt.Fprintln(w, "Every step reached its expected state on GitLab.")
}
