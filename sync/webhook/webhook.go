// Package webhook receives GitHub webhook deliveries. It checks the
// X-Hub-Signature-256 HMAC in constant time before reading anything else,
// turns the events sync cares about into small Event values, and hands them
// to a bounded queue: the answer is immediate, and 503 tells GitHub to
// retry when the queue is full.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
)

// MaxBody is GitHub's maximum payload size.
const MaxBody = 25 << 20

// Event is one accepted delivery.
type Event struct {
	Type       string
	Delivery   string
	Received   time.Time
	Repository string
	// PullRequest is the pull request of a pull_request event.
	PullRequest *provider.PullRequest
	// SHA is the commit of a status or check_run event, or the new head of
	// a push.
	SHA string
	// Gate carries the result of a status or check_run event: the check run
	// name or status context, and its state.
	Gate      provider.Gate
	GateState provider.GateState
	// Ref is the ref of a push; CloneURLs are the pushed repository's URLs.
	Ref       string
	CloneURLs []string
}

// Handler is the webhook endpoint.
type Handler struct {
	// Secret is the webhook secret; every delivery must be signed with it.
	Secret []byte
	// Queue receives accepted events; a full queue answers 503.
	Queue chan<- Event
	// Metrics counts deliveries; optional.
	Metrics *metrics.Metrics
}

func (h *Handler) count(event, result string) {
	if h.Metrics != nil {
		h.Metrics.WebhookEvents.WithLabelValues(event, result).Inc()
	}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	event := r.Header.Get("X-GitHub-Event")
	metricEvent := event
	switch event {
	case "pull_request", "push", "status", "check_run", "ping":
	default:
		metricEvent = "other"
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil || len(body) > MaxBody {
		h.count(metricEvent, "malformed")
		http.Error(w, "body unreadable or too large", http.StatusBadRequest)
		return
	}
	if len(h.Secret) == 0 || !validSignature(r.Header.Get("X-Hub-Signature-256"), body, h.Secret) {
		h.count(metricEvent, "unauthorized")
		http.Error(w, "missing or invalid X-Hub-Signature-256", http.StatusUnauthorized)
		return
	}
	payload := body
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			h.count(metricEvent, "malformed")
			http.Error(w, "malformed form body", http.StatusBadRequest)
			return
		}
		payload = []byte(form.Get("payload"))
	}
	if metricEvent == "other" {
		h.count(metricEvent, "ignored")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "event ignored\n")
		return
	}
	parsed, err := gh.ParseWebHook(event, payload)
	if err != nil {
		h.count(metricEvent, "malformed")
		http.Error(w, "malformed payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	ev, ok, bad := convert(parsed)
	if bad != "" {
		h.count(metricEvent, "malformed")
		http.Error(w, "malformed payload: "+bad, http.StatusBadRequest)
		return
	}
	if !ok {
		h.count(metricEvent, "ignored")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "nothing to do\n")
		return
	}
	ev.Type, ev.Delivery, ev.Received = event, r.Header.Get("X-GitHub-Delivery"), received
	select {
	case h.Queue <- ev:
		h.count(metricEvent, "queued")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "queued\n")
	default:
		h.count(metricEvent, "rejected")
		w.Header().Set("Retry-After", "5")
		http.Error(w, "queue full, retry later", http.StatusServiceUnavailable)
	}
}

// validSignature checks "sha256=<hex>" against the HMAC of body, in
// constant time.
func validSignature(header string, body, secret []byte) bool {
	hexsig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexsig)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
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
		return Event{Repository: repo, SHA: cr.GetHeadSHA(), Gate: provider.Gate{CheckRun: cr.GetName()}, GateState: st}, true, ""
	}
	return ev, false, ""
}
