// Deliveries of forges other than GitHub, each at a path of its own
// (/webhooks/gitea, /webhooks/forgejo, /webhooks/gitlab), checked with
// that forge's secret and read by that forge's provider package into the
// same events as GitHub's. They share GitHub's bounds: the body limit, the
// reading slots and the read timeout.

package webhook

import (
	"errors"
	"io"
	"net/http"
	"os"

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
	// Read reads a delivery's body (at most limit bytes) and checks its
	// signature with its repository's secret; it returns the event kind
	// and the body.
	Read func(r *http.Request, secrets provider.WebhookSecrets, limit int64) (string, []byte, error)
	// BadSignature is what Read's error wraps when the signature is
	// missing or wrong.
	BadSignature error
	// Convert turns a verified delivery into an event; ok is false when it
	// needs no work (a kind or action sync does not act on).
	Convert func(kind string, body []byte) (ev Event, ok bool, err error)
	// EventHeader names the event kind, DeliveryHeader the delivery's id.
	EventHeader    string
	DeliveryHeader string
	// Kinds are the event kinds counted by name in the metrics; others
	// count as other.
	Kinds []string
}

// Gitea reads the deliveries of Gitea's own webhooks (X-Gitea-Event,
// X-Gitea-Signature), of Gitea or of Forgejo (which sends them too), for
// the applications of forge.
func Gitea(forge string, secret []byte, repositories map[string][]byte) Forge {
	return Forge{
		Secret:            secret,
		RepositorySecrets: repositories,
		Read:              giteaprovider.ReadVerified,
		BadSignature:      giteaprovider.ErrBadSignature,
		Convert:           giteaConvert(forge),
		EventHeader:       giteaprovider.HeaderEvent,
		DeliveryHeader:    giteaprovider.HeaderDelivery,
		Kinds:             []string{giteaprovider.EventPullRequest, giteaprovider.EventIssueComment},
	}
}

func giteaConvert(forge string) func(string, []byte) (Event, bool, error) {
	return func(kind string, body []byte) (Event, bool, error) {
		ev, err := giteaprovider.ParseWebhook(kind, body)
		switch {
		case errors.Is(err, giteaprovider.ErrUnknownEvent):
			return Event{}, false, nil
		case err != nil:
			return Event{}, false, err
		}
		out := Event{Forge: forge, Repository: ev.Repository}
		switch ev.Kind {
		case giteaprovider.EventPullRequest:
			if ev.PullRequest.Number == 0 {
				return Event{}, false, errors.New("pull_request needs pull_request.number")
			}
			out.Type, out.PullRequest, out.SHA = "pull_request", ev.PullRequest, ev.PullRequest.HeadSHA
			return out, true, nil
		case giteaprovider.EventIssueComment:
			// As on GitHub: only a new comment on a pull request that
			// carries a command is work, and only as a hint (the command is
			// read back through the API).
			c := ev.Comment
			if ev.Action != "created" || !ev.IsPull || c.ID == 0 || c.Number == 0 || !render.HasCommand(c.Body) {
				return Event{}, false, nil
			}
			out.Type, out.Comment = "issue_comment", c
			return out, true, nil
		}
		return Event{}, false, nil
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
		Read:              glprovider.ReadVerified,
		BadSignature:      glprovider.ErrBadToken,
		Convert:           gitlabConvert,
		EventHeader:       glprovider.HeaderEvent,
		DeliveryHeader:    glprovider.HeaderDelivery,
		Kinds:             []string{glprovider.EventMergeRequest, glprovider.EventNote, glprovider.EventPipeline, glprovider.EventPush},
	}
}

func gitlabConvert(kind string, body []byte) (Event, bool, error) {
	ev, err := glprovider.ParseWebhook(kind, body)
	switch {
	case errors.Is(err, glprovider.ErrUnknownEvent):
		return Event{}, false, nil
	case err != nil:
		return Event{}, false, err
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
			return Event{}, false, nil
		}
		out.Type, out.Comment = "issue_comment", c
	default:
		return Event{}, false, nil
	}
	return out, true, nil
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

// countingReader counts what was read of a body, so that a body over the
// limit is told from one that is unreadable.
type countingReader struct {
	io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// serveForge answers a delivery at a forge's own path.
func (h *Handler) serveForge(w http.ResponseWriter, r *http.Request, name string) {
	received := h.now()
	f, ok := h.Forges[name]
	if !ok {
		h.count("other", "unknown_forge")
		http.Error(w, "sync serves no forge "+name, http.StatusNotFound)
		return
	}
	kind := r.Header.Get(f.EventHeader)
	metricEvent := name + ":other"
	for _, k := range f.Kinds {
		if kind == k {
			metricEvent = name + ":" + k
		}
	}
	body, ok := h.forgeBody(w, r, f, metricEvent)
	if !ok {
		return
	}
	ev, ok, err := f.Convert(body.kind, body.data)
	if err != nil {
		h.count(metricEvent, "malformed")
		http.Error(w, "malformed payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !ok {
		h.count(metricEvent, "ignored")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "event ignored\n")
		return
	}
	ev.Delivery, ev.Received = r.Header.Get(f.DeliveryHeader), received
	h.enqueue(w, ev, metricEvent)
}

func (f Forge) secrets() provider.WebhookSecrets {
	return provider.WebhookSecrets{Default: f.Secret, ByPath: f.RepositorySecrets}
}

type forgeDelivery struct {
	kind string
	data []byte
}

// forgeBody reads and verifies a forge's delivery within the handler's
// bounds; when it answers the delivery (a refusal) it returns false.
func (h *Handler) forgeBody(w http.ResponseWriter, r *http.Request, f Forge, metricEvent string) (forgeDelivery, bool) {
	refuse := func(code int, result, msg string) (forgeDelivery, bool) {
		h.count(metricEvent, result)
		if code != http.StatusUnauthorized {
			w.Header().Set("Connection", "close")
		}
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", RetryAfter)
		}
		http.Error(w, msg, code)
		return forgeDelivery{}, false
	}
	limit := h.maxBody()
	switch {
	case f.secrets().Empty():
		return refuse(http.StatusUnauthorized, "unauthorized", "no webhook secret for this forge")
	case r.ContentLength > limit:
		return refuse(http.StatusRequestEntityTooLarge, "too_large", "body too large")
	case !h.acquire():
		return refuse(http.StatusServiceUnavailable, "busy", "too many deliveries being read, retry later")
	}
	timeout := h.ReadTimeout
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	_ = http.NewResponseController(w).SetReadDeadline(wall.Now().Add(timeout))
	body := &countingReader{ReadCloser: r.Body}
	r.Body = body
	kind, data, err := f.Read(r, f.secrets(), limit)
	h.release()
	switch {
	case err == nil:
		return forgeDelivery{kind, data}, true
	case errors.Is(err, f.BadSignature):
		return refuse(http.StatusUnauthorized, "unauthorized", "missing or invalid signature")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refuse(http.StatusRequestTimeout, "timeout", "body not received in time")
	case body.n > limit:
		return refuse(http.StatusRequestEntityTooLarge, "too_large", "body too large")
	}
	return refuse(http.StatusBadRequest, "malformed", "body unreadable")
}
