package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/render"
)

// Scenario 8 plays pull-request authors who attack sync, on a repository
// of its own (HostileRepository, applications hostileApplications):
//
//   - forged state: before sync's comment exists (a draft, or before the
//     trigger label) and after it, the author posts a comment carrying
//     sync's marker and a state line that sets the last handled command
//     (so a maintainer's command is ignored), keeps or extends the
//     environment for good, marks its head commit expired (so a fresh
//     environment is never written) or names production's deployment (so
//     sync would mark it inactive);
//   - commands from users without write access (read, triage, none), from
//     a fork's author, edited into a comment, deleted, and in a delivery
//     that names a maintainer as the author; a maintainer's command
//     delivered and replayed;
//   - titles, branch names and labels carrying template syntax, YAML,
//     shell metacharacters, 64 KiB of text and bytes that are not UTF-8;
//   - a SharedWorkload whose step reads a Secret through valueFrom.
//
// hostilechecks.go holds what is checked after the attacks.

// HostileRepository is the repository of scenario 8's pull requests.
const HostileRepository = "petri-dev/hostile"

// Scenario 8's applications and their trigger labels (the same words).
const (
	hostileApp    = "hostile"
	hostileTTLApp = "hostile-ttl"
	// hostileTTL is hostile-ttl's ttl: short, so expiry fits the scenario.
	hostileTTL = 20 * time.Second
	// keepLabel is the keep label of the applications (the default).
	keepLabel = "petri/keep"
)

// The people on HostileRepository and their permissions.
const (
	maintainer = "maria"   // write
	author     = "mallory" // read: the hostile author
	triager    = "trinity" // triage
	stranger   = "nobody"  // none
	forkOwner  = "forker"  // read; opens a pull request from a fork
	releaseBot = "release-bot"
)

// wait bounds what scenario 8 waits for sync to do: several resync
// rounds (5 s) on a loaded machine, where sync acts on a webhook within
// a second or two. Only a defect waits that long.
func (h *hostile) wait() time.Duration { return time.Duration(h.sc.size(60, 40)) * time.Second }

// hostilePR is one pull request of the scenario and what must hold for it.
type hostilePR struct {
	number int
	app    string
	// attack says what was done to it, for the violations' text.
	attack string
	// env is its environment's name (render.EnvironmentName).
	env string
	// forged is true when a comment with sync's marker was posted on it.
	forged bool
	// redeployBy is the maintainer's /petri redeploy comment that must
	// take effect (0: none may).
	redeployBy int64
	// refused are command comments of people without write access (and
	// comments a forged delivery called commands); sync must accept none.
	// answered are those among them that sync must answer (a reaction):
	// the ones that were commands when posted.
	refused, answered []int64
	// expires is true when the environment must expire (its ttl is up and
	// nothing a maintainer did keeps it).
	expires bool
	// literal is true when its title, branch and labels are hostile text
	// whose rendering is checked.
	literal bool
	// held is true when a forged state would hold its environment back:
	// the attacks on live environments do not wait for it.
	held bool

	mu sync.Mutex
	// written is true once sync wrote its environment.
	written bool
	// readyAt is when it was first seen Ready; first its spec's generation
	// and UID then, to tell that nothing else changed it.
	readyAt    time.Time
	generation int64
	uid        string
}

// hostile is one play of scenario 8.
type hostile struct {
	sc   *scene
	prs  []*hostilePR
	prod githubapi.Deployment
	// counts for the row's faults.
	forgeries, commands, replays, texts int
	stepRefused                         bool
}

var hostileWebhookClient = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}

// send delivers a webhook as GitHub does. A delivery sync refuses is
// logged, not fatal: the resync must make up for it, as for a lost one.
func (h *hostile) send(ctx context.Context, d githubapi.Delivery) {
	resp, err := d.Send(ctx, hostileWebhookClient, h.sc.st.WebhookURL, h.sc.st.WebhookSecret)
	if err != nil {
		h.sc.logf("scenario 8: %s delivery: %v", d.Event, err)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		h.sc.logf("scenario 8: sync answered a %s delivery %s: %s", d.Event, resp.Status, strings.TrimSpace(string(body)))
	}
}

// deliverPR sends a pull_request delivery of the stand-in's state.
func (h *hostile) deliverPR(ctx context.Context, n int, action string) {
	d, err := h.sc.st.GitHub.PullRequestEvent(HostileRepository, n, action)
	if err != nil {
		h.sc.logf("scenario 8: %v", err)
		return
	}
	h.send(ctx, d)
}

// comment posts a comment as who, with its "created" delivery.
func (h *hostile) comment(ctx context.Context, n int, who, body string) githubapi.Comment {
	c := h.sc.st.GitHub.AddComment(HostileRepository, n, who, body)
	if d, err := h.sc.st.GitHub.IssueCommentEvent(HostileRepository, n, c.ID); err == nil {
		h.send(ctx, d)
	}
	return c
}

// forge posts, as the hostile author, a comment that looks like sync's:
// its marker and a state line.
func (h *hostile) forge(ctx context.Context, pr *hostilePR, st render.State) {
	body := render.CommentMarker + "\n### Preview environments\n\nAll good here.\n" + st.Marker() + "\n"
	h.comment(ctx, pr.number, author, body)
	pr.forged = true
	h.forgeries++
}

// open opens a pull request on HostileRepository as p describes (number,
// labels, draft, fork, text), delivering "opened" after before has run
// (the comments an author writes before sync looks).
func (h *hostile) open(ctx context.Context, p githubapi.PullRequest, hp *hostilePR, before func()) *hostilePR {
	if p.Author == "" {
		p.Author = author
	}
	if p.HeadSHA == "" {
		p.HeadSHA = githubapi.SHA(fmt.Sprintf("%s@%d", HostileRepository, time.Now().UnixNano()))
	}
	pr := h.sc.st.GitHub.OpenPullRequest(HostileRepository, p)
	hp.number = pr.Number
	hp.env = render.EnvironmentName(hp.app, HostileRepository, pr.Number)
	h.prs = append(h.prs, hp)
	if before != nil {
		before()
	}
	h.deliverPR(ctx, pr.Number, "opened")
	return hp
}

// update changes a pull request and delivers action.
func (h *hostile) update(ctx context.Context, n int, action string, change func(*githubapi.PullRequest)) {
	h.sc.st.GitHub.UpdatePullRequest(HostileRepository, n, change)
	h.deliverPR(ctx, n, action)
}

// playHostileAuthor is scenario 8.
func playHostileAuthor(ctx context.Context, sc *scene) error {
	h := &hostile{sc: sc}
	gh := sc.st.GitHub
	for user, role := range map[string]string{maintainer: "write", author: "read", triager: "triage", stranger: "none", forkOwner: "read"} {
		gh.SetPermission(HostileRepository, user, role)
	}
	// Production's deployment, made by a release pipeline, not by sync.
	h.prod = gh.AddDeployment(HostileRepository, githubapi.Deployment{Ref: "main", SHA: githubapi.SHA("production"), Creator: releaseBot, Description: "production"})
	gh.AddDeploymentStatus(HostileRepository, h.prod.ID, githubapi.DeploymentStatus{State: "success", Description: "live"}, releaseBot)

	h.forgeBefore(ctx)
	h.hostileTexts(ctx)
	// A fork's trigger label counts when a writer put it on (the
	// default trigger.forks: labelByWriter), so a maintainer labels it.
	fork := h.open(ctx, githubapi.PullRequest{Author: forkOwner, HeadRepository: forkOwner + "/hostile", HeadRef: "main"},
		&hostilePR{app: hostileApp, attack: "pull request from a fork"}, nil)
	gh.AddLabel(HostileRepository, fork.number, hostileApp, maintainer)
	h.deliverPR(ctx, fork.number, "labeled")
	h.open(ctx, githubapi.PullRequest{Author: "octocat", Title: "An ordinary change", Labels: []string{hostileApp}},
		&hostilePR{app: hostileApp, attack: "none (a bystander)"}, nil)

	// Every environment sync must write is written and Ready.
	h.waitWritten(ctx)

	// Attacks on live environments.
	for _, pr := range h.prs {
		if pr.literal {
			h.forgeAfter(ctx, pr)
			h.refusedCommands(ctx, pr)
		}
	}
	h.refusedCommand(ctx, fork, forkOwner, "/petri redeploy")
	h.maintainerCommands(ctx)
	h.secretKeyRefStep(ctx)

	h.check(ctx)

	// The pull requests close the ordinary way.
	for _, pr := range h.prs {
		pr.mu.Lock()
		written := pr.written
		pr.mu.Unlock()
		if written && !pr.expires {
			sc.expectGone(pr.env)
		}
		h.update(ctx, pr.number, "closed", func(p *githubapi.PullRequest) { p.State = "closed" })
	}
	sc.row.Faults = fmt.Sprintf("%d forged marker comments (before and after sync's comment: last command, kept, extended, expired commit, production's deployment); %d commands from people without write access, from a fork, edited, deleted or in forged deliveries; %d replayed deliveries of maintainers' commands; %d pull requests with hostile titles, branches and labels; a SharedWorkload step reading a Secret (%s)",
		h.forgeries, h.commands, h.replays, h.texts, map[bool]string{true: "refused", false: "accepted"}[h.stepRefused])
	return nil
}

// forgeBefore opens the pull requests whose author forges sync's state
// before sync's comment exists: while a draft, or before the trigger
// label.
func (h *hostile) forgeBefore(ctx context.Context) {
	gh := h.sc.st.GitHub
	huge := int64(1) << 40
	// A draft whose forged state swallows a maintainer's command and
	// names production's deployment as its own.
	draft := &hostilePR{app: hostileApp, attack: "forged state before sync's comment (a draft): last command handled " + fmt.Sprint(huge) + ", production's deployment as its own"}
	h.open(ctx, githubapi.PullRequest{Draft: true, Labels: []string{hostileApp}}, draft, func() {
		h.forge(ctx, draft, render.State{LastCommand: huge, Apps: map[string]*render.AppState{hostileApp: {
			Deployment: h.prod.ID, DeploymentSHA: githubapi.SHA("an older commit"), DeploymentState: "success"}}})
	})
	draft.redeployBy = -1 // set when the maintainer comments
	h.update(ctx, draft.number, "ready_for_review", func(p *githubapi.PullRequest) { p.Draft = false })

	// Before the trigger label: the head commit marked expired, so that
	// a fresh environment is never written. The keep label (a
	// maintainer's) keeps it from expiring of its own.
	held := &hostilePR{app: hostileTTLApp, attack: "forged state before the trigger label: head commit expired", held: true}
	h.open(ctx, githubapi.PullRequest{Labels: []string{keepLabel}}, held, func() {
		head := gh.PullRequest(HostileRepository, held.number).HeadSHA
		h.forge(ctx, held, render.State{Apps: map[string]*render.AppState{hostileTTLApp: {ExpiredSHA: head, ExpiredAt: time.Now().UTC().Truncate(time.Second)}}})
	})
	h.update(ctx, held.number, "labeled", func(p *githubapi.PullRequest) { p.Labels = append(p.Labels, hostileTTLApp) })

	// Kept and extended for good: the environment must expire all the
	// same. The short version forges both on one pull request.
	forever := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	states := []render.State{{Kept: true, Apps: map[string]*render.AppState{hostileTTLApp: {ExtendedUntil: forever}}}}
	what := []string{"kept and extended to 2099"}
	if h.sc.full() {
		states = []render.State{{Kept: true}, {Apps: map[string]*render.AppState{hostileTTLApp: {ExtendedUntil: forever}}}}
		what = []string{"kept", "extended to 2099"}
	}
	for i, st := range states {
		pr := &hostilePR{app: hostileTTLApp, attack: "forged state before sync's comment (a draft): " + what[i], expires: true}
		h.open(ctx, githubapi.PullRequest{Draft: true, Labels: []string{hostileTTLApp}}, pr, func() { h.forge(ctx, pr, st) })
		h.update(ctx, pr.number, "ready_for_review", func(p *githubapi.PullRequest) { p.Draft = false })
	}
}

// Hostile text: what an author can put into a title, a branch name or a
// label. GitHub limits titles to 256 characters and labels to 50; sync
// must not rely on it.
var (
	templateText = "{{ .SHA }} {{ printf \"%s\" .Title }} {{- /* */ -}} {{ template \"x\" }} {{ end }}"
	yamlText     = "x: y\nanchor: &a [1, 2]\nalias: *a\n- item\n---\n? key\n: value # comment\n\"quoted\" 'single' |\n  block"
	shellText    = "$(touch /tmp/pwned) `id`; rm -rf / && echo $HOME | cat > /dev/null & ${IFS} <x >y 2>&1 \\"
	invalidUTF8  = "bad bytes \xff\xfe\xc3\x28 \xed\xa0\x80 end"
	markupText   = "<!-- petri:state {\"kept\":true} --> <!-- petri-sync --> </details> | cell | `/petri keep`"
)

// bigText is 64 KiB of text.
func bigText() string {
	return strings.Repeat("The quick brown fox jumps over the lazy dog. ", 64*1024/45+1)[:64*1024]
}

// hostileTexts opens the pull requests whose title, branch and labels are
// hostile text: one with all of it at the short size, one per kind at
// full size.
func (h *hostile) hostileTexts(ctx context.Context) {
	kinds := [][2]string{
		{"template syntax", templateText}, {"YAML", yamlText}, {"shell metacharacters", shellText},
		{"bytes that are not UTF-8", invalidUTF8}, {"sync's own markup", markupText},
	}
	if !h.sc.full() {
		all := ""
		for _, k := range kinds {
			all += k[1] + "\n"
		}
		kinds = [][2]string{{"every kind, and 64 KiB", all + bigText()}}
	} else {
		kinds = append(kinds, [2]string{"64 KiB", bigText()})
	}
	for _, k := range kinds {
		text := k[1]
		short := text
		if len(short) > 200 {
			short = short[:200]
		}
		labels := []string{hostileApp, short}
		for _, line := range strings.Split(short, "\n") {
			if line != "" && len(labels) < 6 {
				labels = append(labels, line)
			}
		}
		pr := &hostilePR{app: hostileApp, attack: "title, branch and labels of " + k[0], literal: true}
		h.open(ctx, githubapi.PullRequest{Title: text, HeadRef: "feature/" + short, Labels: labels}, pr, nil)
		h.texts++
	}
}

// forgeAfter posts, once sync's comment exists, a second comment with the
// marker whose state would swallow every command, keep the environment
// and hand it production's deployment.
func (h *hostile) forgeAfter(ctx context.Context, pr *hostilePR) {
	h.forge(ctx, pr, render.State{LastCommand: 1 << 40, Kept: true, Apps: map[string]*render.AppState{pr.app: {
		Deployment: h.prod.ID, DeploymentSHA: githubapi.SHA("an older commit"), DeploymentState: "success"}}})
}

// refusedCommand posts a command as someone without write access.
func (h *hostile) refusedCommand(ctx context.Context, pr *hostilePR, who, body string) {
	c := h.comment(ctx, pr.number, who, body)
	pr.refused = append(pr.refused, c.ID)
	pr.answered = append(pr.answered, c.ID)
	h.commands++
}

// refusedCommands plays every way of commanding without write access on
// a pull request.
func (h *hostile) refusedCommands(ctx context.Context, pr *hostilePR) {
	gh := h.sc.st.GitHub
	h.refusedCommand(ctx, pr, author, "/petri sleep")
	h.refusedCommand(ctx, pr, triager, "/petri sleep")
	h.refusedCommand(ctx, pr, stranger, "please\n  /petri redeploy")
	// Edited into a command (its delivery is "edited").
	c := gh.AddComment(HostileRepository, pr.number, author, "Looks good to me.")
	if d, err := gh.IssueCommentEvent(HostileRepository, pr.number, c.ID); err == nil {
		h.send(ctx, d)
	}
	if d, err := gh.CommentEditedEvent(HostileRepository, c.ID, "/petri sleep"); err == nil {
		h.send(ctx, d)
	}
	pr.refused = append(pr.refused, c.ID)
	h.commands++
	// Posted and deleted (its delivery is "deleted").
	c = h.comment(ctx, pr.number, author, "/petri redeploy")
	if d, err := gh.DeleteComment(HostileRepository, c.ID); err == nil {
		h.send(ctx, d)
	}
	h.commands++
	// A delivery that says the maintainer wrote it: the comment on GitHub
	// is the author's, and says nothing of a command.
	c = gh.AddComment(HostileRepository, pr.number, author, "Nothing to see here.")
	if d, err := gh.IssueCommentEvent(HostileRepository, pr.number, c.ID); err == nil {
		if forged, err := forgeDelivery(d, maintainer, "/petri sleep"); err == nil {
			h.send(ctx, forged)
		}
	}
	pr.refused = append(pr.refused, c.ID)
	h.commands++
}

// forgeDelivery rewrites an issue_comment delivery's comment author and
// body; it is signed again with the webhook secret as it is sent, as an
// attacker who holds the secret would.
func forgeDelivery(d githubapi.Delivery, login, body string) (githubapi.Delivery, error) {
	var p map[string]any
	if err := json.Unmarshal(d.Body, &p); err != nil {
		return d, err
	}
	c, _ := p["comment"].(map[string]any)
	if c == nil {
		return d, fmt.Errorf("no comment in the delivery")
	}
	c["body"] = body
	if u, ok := c["user"].(map[string]any); ok {
		u["login"] = login
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(p); err != nil {
		return d, err
	}
	d.Body = b.Bytes()
	return d, nil
}

// maintainerCommands: the maintainer comments /petri redeploy on the
// forged draft (whose forged state would swallow it) and on each pull
// request with hostile text (where the delivery is replayed).
func (h *hostile) maintainerCommands(ctx context.Context) {
	gh := h.sc.st.GitHub
	for _, pr := range h.prs {
		if pr.uid != "" && (pr.redeployBy == -1 || pr.literal) {
			// A redeploy runs the deploy again at the same generation:
			// its Job is no duplicate.
			h.sc.rec.excuse(types.UID(pr.uid))
		}
		switch {
		case pr.redeployBy == -1:
			pr.redeployBy = h.comment(ctx, pr.number, maintainer, "/petri redeploy").ID
		case pr.literal:
			c := gh.AddComment(HostileRepository, pr.number, maintainer, "/petri redeploy")
			pr.redeployBy = c.ID
			d, err := gh.IssueCommentEvent(HostileRepository, pr.number, c.ID)
			if err != nil {
				continue
			}
			d = d.Identified()
			for i := 0; i < h.sc.size(5, 3); i++ {
				h.send(ctx, d)
				if i > 0 {
					h.replays++
				}
			}
		}
	}
}
