// The forges behind the one intake: what each reads of its deliveries, at
// a path of its own (/webhooks/github, /webhooks/gitea, /webhooks/forgejo,
// /webhooks/gitlab), checked with that forge's secrets and read by that
// forge's provider package into the same events. They share the handler's
// bounds: the body limit, the reading slots and the read timeout.

package webhook

import (
	"errors"
	"net/http"
	"slices"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/provider"
	giteaprovider "github.com/petri-dev/petri/sync/provider/gitea"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
	"github.com/petri-dev/petri/sync/render"
)

// Forge reads one forge's deliveries.
type Forge struct {
	// Secret is the forge-wide secret of the forge's webhooks: for the
	// repositories without one of their own in RepositorySecrets.
	Secret []byte
	// RepositorySecrets are secrets of single repositories, owners or
	// (GitLab) groups, by path in lower case (provider.WebhookSecrets).
	RepositorySecrets map[string][]byte
	// Presented tells from a delivery's headers alone whether it carries a
	// credential that may be right (a well-formed signature, a token that
	// is one of the secrets): one that does not is refused unread.
	Presented func(h http.Header, secrets provider.WebhookSecrets) bool
	// Verified tells whether a body read is the forge's: signed with (or
	// sent with) the secret of the repository it names.
	Verified func(h http.Header, body []byte, secrets provider.WebhookSecrets) bool
	// SignatureHeader names the header Presented and Verified read, for
	// the refusal's message.
	SignatureHeader string
	// Misrouted, when set, names the forge a delivery's headers say it is
	// of when that is another forge: it is refused, not misread.
	Misrouted func(h http.Header) string
	// Convert turns a verified delivery into an event: ErrIgnored for a
	// kind or action sync does not act on, ErrNoWork for one it reads that
	// needs no work, any other error for a payload it cannot read.
	Convert func(d Delivery) (Event, error)
	// EventHeader names the event kind, DeliveryHeader the delivery's id.
	EventHeader    string
	DeliveryHeader string
	// Kinds are the event kinds counted by name in the metrics; others
	// count as other.
	Kinds []string
}

// Delivery is a verified delivery: its kind (the forge's event header),
// its headers and its body.
type Delivery struct {
	Kind   string
	Header http.Header
	Body   []byte
}

// What Forge.Convert answers for a delivery that is no work: ErrIgnored is
// acknowledged with 202, ErrNoWork (GitHub's ping, say) with 200.
var (
	ErrIgnored = errors.New("event ignored")
	ErrNoWork  = errors.New("nothing to do")
)

func (f Forge) secrets() provider.WebhookSecrets {
	return provider.WebhookSecrets{Default: f.Secret, ByPath: f.RepositorySecrets}
}

func (f Forge) misrouted(h http.Header) string {
	if f.Misrouted == nil {
		return ""
	}
	return f.Misrouted(h)
}

// metricEvent is how a delivery of kind to forge name is counted: by its
// kind when the forge reads it, else as other; GitHub's kinds bare, as
// they were before other forges were served, others' after their forge.
func (f Forge) metricEvent(name, kind string) string {
	if !known(f.Kinds, kind) {
		kind = "other"
	}
	if name == config.ForgeGitHub {
		return kind
	}
	return name + ":" + kind
}

func known(kinds []string, kind string) bool { return slices.Contains(kinds, kind) }

// Gitea reads the deliveries of Gitea's own webhooks (X-Gitea-Event,
// X-Gitea-Signature), of Gitea or of Forgejo (which sends them too), for
// the applications of forge.
func Gitea(forge string, secret []byte, repositories map[string][]byte) Forge {
	return Forge{
		Secret:            secret,
		RepositorySecrets: repositories,
		Presented:         func(h http.Header, _ provider.WebhookSecrets) bool { return giteaprovider.SignaturePresent(h) },
		Verified:          giteaprovider.Verified,
		SignatureHeader:   giteaprovider.HeaderSignature,
		Convert:           giteaConvert(forge),
		EventHeader:       giteaprovider.HeaderEvent,
		DeliveryHeader:    giteaprovider.HeaderDelivery,
		Kinds:             []string{giteaprovider.EventPullRequest, giteaprovider.EventIssueComment},
	}
}

func giteaConvert(forge string) func(Delivery) (Event, error) {
	return func(d Delivery) (Event, error) {
		ev, err := giteaprovider.ParseWebhook(d.Kind, d.Body)
		switch {
		case errors.Is(err, giteaprovider.ErrUnknownEvent):
			return Event{}, ErrIgnored
		case err != nil:
			return Event{}, err
		}
		out := Event{Forge: forge, Repository: ev.Repository}
		switch ev.Kind {
		case giteaprovider.EventPullRequest:
			if ev.PullRequest.Number == 0 {
				return Event{}, errors.New("pull_request needs pull_request.number")
			}
			out.Type, out.PullRequest, out.SHA = "pull_request", ev.PullRequest, ev.PullRequest.HeadSHA
			return out, nil
		case giteaprovider.EventIssueComment:
			// As on GitHub: only a new comment on a pull request that
			// carries a command is work, and only as a hint (the command is
			// read back through the API).
			c := ev.Comment
			if ev.Action != "created" || !ev.IsPull || c.ID == 0 || c.Number == 0 || !render.HasCommand(c.Body) {
				return Event{}, ErrIgnored
			}
			out.Type, out.Comment = "issue_comment", c
			return out, nil
		}
		return Event{}, ErrIgnored
	}
}

// GitLab reads the deliveries of GitLab's webhooks of a project or a group
// (X-Gitlab-Event, the secret token in X-Gitlab-Token). A merge request
// hook queues its project's pass as a hint, without its payload: GitLab's
// hook names the author by id alone and a pipeline's merge request carries
// no head commit, so what the pass decides on is read through the API. A
// pipeline hook and a push queue the pass too; a note with a command is a
// hint as on GitHub.
func GitLab(secret []byte, projects map[string][]byte) Forge {
	return Forge{
		Secret:            secret,
		RepositorySecrets: projects,
		Presented:         glprovider.TokenPresent,
		Verified:          glprovider.Verified,
		SignatureHeader:   glprovider.HeaderToken,
		Convert:           gitlabConvert,
		EventHeader:       glprovider.HeaderEvent,
		DeliveryHeader:    glprovider.HeaderDelivery,
		Kinds:             []string{glprovider.EventMergeRequest, glprovider.EventNote, glprovider.EventPipeline, glprovider.EventPush},
	}
}

func gitlabConvert(d Delivery) (Event, error) {
	ev, err := glprovider.ParseWebhook(d.Kind, d.Body)
	switch {
	case errors.Is(err, glprovider.ErrUnknownEvent):
		return Event{}, ErrIgnored
	case err != nil:
		return Event{}, err
	}
	out := Event{Forge: config.ForgeGitLab, Repository: ev.Repository, SHA: ev.SHA, Ref: ev.Ref}
	switch ev.Kind {
	case glprovider.EventMergeRequest:
		out.Type = "pull_request"
	case glprovider.EventPipeline:
		out.Type = "pipeline"
	case glprovider.EventPush:
		out.Type = "push"
	case glprovider.EventNote:
		c := ev.Comment
		if ev.Action != "create" || !ev.IsPull || c == nil || c.ID == 0 || c.Number == 0 || !render.HasCommand(c.Body) {
			return Event{}, ErrIgnored
		}
		out.Type, out.Comment = "issue_comment", c
	default:
		return Event{}, ErrIgnored
	}
	return out, nil
}

// foreignHeaders mark deliveries of other forges. Gitea and Forgejo send
// X-GitHub-Event and X-Hub-Signature-256 too, but their payloads are not
// GitHub's: at GitHub's path they are refused rather than misread.
var foreignHeaders = map[string]string{
	"X-Gitea-Event":   config.ForgeGitea,
	"X-Forgejo-Event": config.ForgeForgejo,
	"X-Gitlab-Event":  config.ForgeGitLab,
}

// foreign names the forge of a delivery sent to GitHub's path that is
// another forge's; empty for GitHub's own.
func foreign(h http.Header) string {
	for k, f := range foreignHeaders {
		if h.Get(k) != "" {
			return f
		}
	}
	return ""
}
