// GitHub's deliveries, at /webhooks/github: one more forge
// behind the handler's one intake, signed with X-Hub-Signature-256 and read
// through go-github into sync's events.

package webhook

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
	"github.com/petri-dev/petri/sync/render"
)

// githubKinds are the events sync reads of GitHub's.
var githubKinds = []string{"pull_request", "push", "status", "check_run", "issue_comment", "merge_group", "ping"}

// GitHub reads GitHub's deliveries (X-GitHub-Event, X-Hub-Signature-256).
// A form-encoded delivery (application/x-www-form-urlencoded) carries its
// payload in the form's payload field. Gitea and Forgejo send GitHub's
// headers too, and GitLab may be pointed at any path: a delivery whose
// headers say it is another forge's is refused at GitHub's path rather
// than misread.
func GitHub(secret []byte, repositories map[string][]byte) Forge {
	return Forge{
		Secret:            secret,
		RepositorySecrets: repositories,
		Presented:         func(h http.Header, _ provider.WebhookSecrets) bool { return ghprovider.SignaturePresent(h) },
		Verified:          ghprovider.Verified,
		SignatureHeader:   ghprovider.HeaderSignature,
		Misrouted:         foreign,
		Convert:           githubConvert,
		EventHeader:       ghprovider.HeaderEvent,
		DeliveryHeader:    ghprovider.HeaderDelivery,
		Kinds:             githubKinds,
	}
}

// githubConvert reads a GitHub delivery. Only a form body that does not
// parse is refused before the event's kind is looked at; kinds sync does
// not read are ignored, and a ping is nothing to do.
func githubConvert(d Delivery) (Event, error) {
	payload := d.Body
	if strings.HasPrefix(d.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		form, err := url.ParseQuery(string(d.Body))
		if err != nil {
			return Event{}, errors.New("form body does not parse")
		}
		payload = []byte(form.Get("payload"))
	}
	if !known(githubKinds, d.Kind) {
		return Event{}, ErrIgnored
	}
	parsed, err := gh.ParseWebHook(d.Kind, payload)
	if err != nil {
		return Event{}, err
	}
	ev, ok, bad := convert(parsed)
	switch {
	case bad != "":
		return Event{}, errors.New(bad)
	case !ok:
		return Event{}, ErrNoWork
	}
	ev.Type = d.Kind
	return ev, nil
}

// convert extracts what sync needs; ok is false for events that need no
// work (a ping), bad names a missing required field.
func convert(parsed any) (ev Event, ok bool, bad string) {
	switch e := parsed.(type) {
	case *gh.PingEvent:
		return ev, false, ""
	case *gh.PullRequestEvent:
		repo := e.GetRepo().GetFullName()
		if repo == "" || e.PullRequest == nil || e.PullRequest.GetNumber() == 0 {
			return ev, false, "pull_request needs repository.full_name and pull_request.number"
		}
		pr := ghprovider.FromEvent(repo, e.PullRequest)
		return Event{Repository: repo, PullRequest: &pr, SHA: pr.HeadSHA}, true, ""
	case *gh.PushEvent:
		repo := e.GetRepo().GetFullName()
		if repo == "" {
			return ev, false, "push needs repository.full_name"
		}
		r := e.GetRepo()
		return Event{Repository: repo, Ref: e.GetRef(), SHA: e.GetAfter(),
			CloneURLs: []string{r.GetCloneURL(), r.GetSSHURL(), r.GetGitURL(), r.GetHTMLURL(), r.GetURL()}}, true, ""
	case *gh.StatusEvent:
		repo := e.GetRepo().GetFullName()
		if repo == "" || e.GetSHA() == "" {
			return ev, false, "status needs repository.full_name and sha"
		}
		st := provider.GatePending
		switch e.GetState() {
		case "success":
			st = provider.GatePassed
		case "failure", "error":
			st = provider.GateFailed
		}
		return Event{Repository: repo, SHA: e.GetSHA(), Gate: provider.Gate{StatusContext: e.GetContext()}, GateState: st}, true, ""
	case *gh.IssueCommentEvent:
		repo := e.GetRepo().GetFullName()
		c := e.GetComment()
		if repo == "" || e.GetIssue().GetNumber() == 0 || c.GetID() == 0 {
			return ev, false, "issue_comment needs repository.full_name, issue.number and comment.id"
		}
		// Only a new comment on a pull request that carries a command is
		// work; an edited or deleted one is never acted on.
		if e.GetAction() != "created" || !e.GetIssue().IsPullRequest() || !render.HasCommand(c.GetBody()) {
			return ev, false, ""
		}
		return Event{Repository: repo, Comment: &provider.Comment{ID: c.GetID(), Number: e.GetIssue().GetNumber(), Author: c.GetUser().GetLogin(),
			Body: c.GetBody(), CreatedAt: c.GetCreatedAt().Time, UpdatedAt: c.GetUpdatedAt().Time}}, true, ""
	case *gh.CheckRunEvent:
		repo := e.GetRepo().GetFullName()
		cr := e.GetCheckRun()
		if repo == "" || cr.GetHeadSHA() == "" {
			return ev, false, "check_run needs repository.full_name and check_run.head_sha"
		}
		st := provider.GatePending
		if cr.GetStatus() == "completed" {
			switch cr.GetConclusion() {
			case "success":
				st = provider.GatePassed
			case "neutral", "skipped", "stale":
			default:
				st = provider.GateFailed
			}
		}
		return Event{Repository: repo, SHA: cr.GetHeadSHA(), Gate: provider.Gate{CheckRun: cr.GetName(), App: cr.GetApp().GetSlug()}, GateState: st}, true, ""
	case *gh.MergeGroupEvent:
		return mergeGroup(e)
	}
	return ev, false, ""
}

// mergeGroup reads a merge_group event: checks_requested and destroyed are
// work, any other action is not. The pull request is named only by the
// group's head ref; one that does not parse is refused, naming the field.
func mergeGroup(e *gh.MergeGroupEvent) (ev Event, ok bool, bad string) {
	repo := e.GetRepo().GetFullName()
	g := e.GetMergeGroup()
	switch {
	case repo == "":
		return ev, false, "merge_group needs repository.full_name"
	case e.GetAction() != "checks_requested" && e.GetAction() != "destroyed":
		return ev, false, ""
	case !isSHA(g.GetHeadSHA()):
		return ev, false, "merge_group.head_sha must be a commit's 40 hexadecimal digits"
	}
	base, isBranch := strings.CutPrefix(g.GetBaseRef(), "refs/heads/")
	if !isBranch || base == "" {
		return ev, false, "merge_group.base_ref must be a branch, refs/heads/<branch>"
	}
	n, sha, parsed := ParseQueueRef(g.GetHeadRef())
	if !parsed || !strings.HasPrefix(g.GetHeadRef(), "refs/heads/"+config.MergeQueueBranchPrefix+base+"/") {
		return ev, false, "merge_group.head_ref must be refs/heads/" + config.MergeQueueBranchPrefix + "<base_ref's branch>/pr-<number>-<sha>"
	}
	mg := &MergeGroup{Destroyed: e.GetAction() == "destroyed", HeadSHA: g.GetHeadSHA(), HeadRef: g.GetHeadRef(), BaseRef: g.GetBaseRef(), Number: n, PullRequestSHA: sha}
	return Event{Repository: repo, SHA: mg.HeadSHA, Ref: mg.HeadRef, MergeGroup: mg}, true, ""
}

// maxPullRequest bounds the number read from a merge group's ref, so that
// it and the group's commit fit in a refresh mark's name.
const maxPullRequest = 1<<31 - 1

// ParseQueueRef reads the pull request a merge queue's branch
// (refs/heads/gh-readonly-queue/<base>/pr-<number>-<sha>, or without
// refs/heads/) is for: its number and the commit of it that was queued.
// The base may hold slashes; the last segment names the pull request.
func ParseQueueRef(ref string) (number int, sha string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(ref, "refs/heads/"), config.MergeQueueBranchPrefix)
	i := strings.LastIndex(rest, "/")
	if !ok || i <= 0 {
		return 0, "", false
	}
	num, sha, ok := strings.Cut(strings.TrimPrefix(rest[i+1:], "pr-"), "-")
	if !ok || !strings.HasPrefix(rest[i+1:], "pr-") || !isSHA(sha) || num == "" || num[0] == '0' || len(num) > 10 {
		return 0, "", false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || n > maxPullRequest {
		return 0, "", false
	}
	return n, sha, true
}

// isSHA tells whether s is a commit's full SHA-1: 40 lower-case
// hexadecimal digits.
func isSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
