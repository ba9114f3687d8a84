package stack

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
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

	sc     *Scenario
	branch string
}

// GiteaResult is what the Gitea scenario observed.
type GiteaResult struct {
	// Number is the pull request's number on Gitea.
	Number                 int
	Environment, Namespace string
	// SHAs are the deployed commits, opened then pushed; Revisions the web
	// release's revisions after open, push and the redeploy command.
	SHAs      []string
	Revisions []int
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
	if g.StepTimeout == 0 {
		g.StepTimeout = 3 * time.Minute
	}
	if g.Title == "" {
		g.Title = "Add a greeting"
	}
	g.sc = &Scenario{Stack: g.Stack, Report: g.Report, StepTimeout: g.StepTimeout, w: newWatcher(g.Report)}
	g.branch = "feature/greeting-" + randomHex(3)
	res := &GiteaResult{}
	steps := []struct {
		name string
		run  func(context.Context, *GiteaResult) error
	}{
		{"1. Open a pull request on Gitea", g.open},
		{"2. Push a new commit", g.push},
		{"3. /petri redeploy: refused from a stranger, honoured from a writer", g.command},
		{"4. Merge the pull request", g.merge},
	}
	for _, st := range steps {
		g.Report.Section("%s", st.name)
		start := time.Now()
		if err := st.run(ctx, res); err != nil {
			g.Report.Event("FAILED after %.1fs: %v", time.Since(start).Seconds(), err)
			return res, fmt.Errorf("%s: %w", st.name, err)
		}
		g.Report.Event("step done in %.1fs", time.Since(start).Seconds())
	}
	return res, nil
}

func (g *GiteaScenario) open(ctx context.Context, res *GiteaResult) error {
	srv, r := g.forge().Server, g.Report
	sha, err := srv.Push(DemoRepository, gitea.Commit{Branch: g.branch, Files: map[string]string{"greeting.txt": "Hello\n"}, Message: g.Title})
	if err != nil {
		return err
	}
	r.Event("git push (go-git) of %s to %s/%s.git: %s", g.branch, srv.URL, DemoRepository, short(sha))
	if res.Number, err = srv.OpenPullRequest(DemoRepository, gitea.PullRequest{Head: g.branch, Title: g.Title}); err != nil {
		return err
	}
	if err := srv.AddLabels(DemoRepository, res.Number, DemoLabel); err != nil {
		return err
	}
	r.Event("Gitea: pull request #%d %q opened on %s through Gitea's API, label %q", res.Number, g.Title, DemoRepository, DemoLabel)
	g.sc.Number = res.Number
	env, err := g.sc.waitEnvironment(ctx, sha)
	if err != nil {
		return err
	}
	res.Environment = env.Name
	if env, err = g.sc.waitReady(ctx, env.Name); err != nil {
		return err
	}
	res.Namespace = env.Status.TargetNamespace
	rev, err := g.sc.checkRelease(ctx, res.Namespace, 0)
	if err != nil {
		return err
	}
	res.SHAs, res.Revisions = append(res.SHAs, sha), append(res.Revisions, rev)
	st, err := g.waitStatus(ctx, sha)
	if err != nil {
		return err
	}
	res.Statuses = append(res.Statuses, st)
	_, err = g.waitComment(ctx, res, "Ready")
	return err
}

func (g *GiteaScenario) push(ctx context.Context, res *GiteaResult) error {
	sha, err := g.forge().Server.Push(DemoRepository, gitea.Commit{Branch: g.branch, Files: map[string]string{"greeting.txt": "Hello again\n"}, Message: "Greet again"})
	if err != nil {
		return err
	}
	g.Report.Event("git push of a new commit to %s: %s", g.branch, short(sha))
	env, err := g.sc.waitEnvironment(ctx, sha)
	if err != nil {
		return err
	}
	if env.Name != res.Environment {
		return fmt.Errorf("the push wrote environment %s, not %s", env.Name, res.Environment)
	}
	if env, err = g.sc.waitReady(ctx, env.Name); err != nil {
		return err
	}
	if env.Status.TargetNamespace != res.Namespace {
		return fmt.Errorf("redeployed into %s, not in place in %s", env.Status.TargetNamespace, res.Namespace)
	}
	rev, err := g.sc.checkRelease(ctx, res.Namespace, res.Revisions[0]+1)
	if err != nil {
		return err
	}
	res.SHAs, res.Revisions = append(res.SHAs, sha), append(res.Revisions, rev)
	g.Report.Event("redeployed in place: namespace %s, release revision %d", res.Namespace, rev)
	st, err := g.waitStatus(ctx, sha)
	if err != nil {
		return err
	}
	res.Statuses = append(res.Statuses, st)
	res.Comment, err = g.waitComment(ctx, res, "`"+short(sha)+"`")
	return err
}

func (g *GiteaScenario) command(ctx context.Context, res *GiteaResult) error {
	f, r := g.forge(), g.Report
	var err error
	if res.Refused, err = g.commandAs(ctx, res, f.Stranger); err != nil {
		return err
	}
	r.Event("%s (no write access): sync reacted %s", f.Stranger.Name, res.Refused)
	id := int64(0)
	if res.Honoured, err = g.commandAs(ctx, res, f.Writer, &id); err != nil {
		return err
	}
	r.Event("%s (write access): sync reacted %s", f.Writer.Name, res.Honoured)
	want := fmt.Sprintf("comment-%d", id)
	if err := poll(ctx, g.StepTimeout, func() (bool, error) {
		env := &petriv1.EphemeralEnvironment{}
		err := g.Stack.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: res.Environment}, env)
		return err == nil && env.Annotations["petri.dev/redeploy"] == want, nil
	}, func() string { return "no redeploy asked for " + want }); err != nil {
		return err
	}
	rev, err := g.waitRevision(ctx, res.Namespace, res.Revisions[len(res.Revisions)-1]+1)
	if err != nil {
		return err
	}
	res.Revisions = append(res.Revisions, rev)
	r.Event("redeployed on the command: release revision %d", rev)
	return nil
}

// commandAs writes /petri redeploy as a user and returns sync's reaction
// on it (and the comment's id into id, when given).
func (g *GiteaScenario) commandAs(ctx context.Context, res *GiteaResult, u gitea.User, id ...*int64) (string, error) {
	f := g.forge()
	cid, err := f.Server.Comment(&u, DemoRepository, res.Number, "/petri redeploy")
	if err != nil {
		return "", err
	}
	if len(id) > 0 {
		*id[0] = cid
	}
	g.Report.Event("%s commented /petri redeploy on #%d", u.Name, res.Number)
	var reaction string
	err = poll(ctx, g.StepTimeout, func() (bool, error) {
		rs, err := f.Reactions(cid)
		reaction = rs[f.Sync.Name]
		return err == nil && reaction != "", nil
	}, func() string { return "sync left no reaction on comment " + fmt.Sprint(cid) })
	return reaction, err
}

// waitRevision waits until the web release reaches a revision.
func (g *GiteaScenario) waitRevision(ctx context.Context, ns string, want int) (int, error) {
	var rev int
	err := poll(ctx, g.StepTimeout, func() (bool, error) {
		rels, err := g.Stack.releases(ctx, ns)
		if err != nil {
			return false, nil
		}
		for _, rel := range rels {
			if rel.Name == demoComponent && rel.Version >= want && rel.Info.Status == "deployed" {
				rev = rel.Version
				return true, nil
			}
		}
		return false, nil
	}, func() string { return fmt.Sprintf("release %s not at revision %d", demoComponent, want) })
	return rev, err
}

func (g *GiteaScenario) merge(ctx context.Context, res *GiteaResult) error {
	if err := g.forge().Server.MergePullRequest(DemoRepository, res.Number); err != nil {
		return err
	}
	g.Report.Event("Gitea: pull request #%d merged", res.Number)
	if err := poll(ctx, g.StepTimeout, func() (bool, error) {
		err := g.Stack.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: res.Environment}, &petriv1.EphemeralEnvironment{})
		return apierrors.IsNotFound(err), nil
	}, func() string { return g.sc.explain(ctx, res.Environment) }); err != nil {
		return err
	}
	g.Report.Event("EphemeralEnvironment %s deleted", res.Environment)
	if err := poll(ctx, g.StepTimeout, func() (bool, error) {
		err := g.Stack.Client.Get(ctx, client.ObjectKey{Name: res.Namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	}, nil); err != nil {
		return fmt.Errorf("namespace %s not deleted: %w", res.Namespace, err)
	}
	g.Report.Event("namespace %s is gone", res.Namespace)
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
