// Package webhook receives GitHub webhook deliveries. It checks the
// X-Hub-Signature-256 HMAC in constant time before acting on anything in the
// body, turns the events sync cares about into small Event values, and hands
// them to a bounded queue: the answer is immediate, and 503 tells GitHub to
// retry when the queue is full.
//
// Until its signature is checked a delivery is anyone's, so what it may cost
// is bounded before that: a declared length over MaxBody is refused from the
// header (413), a body of unknown length is read through a limit (413 when
// over), at most MaxConcurrent bodies are read at once (503 with Retry-After
// at once when all are taken, never a queue), and reading one body takes at
// most ReadTimeout. Unauthenticated memory is therefore at most
// MaxConcurrent × MaxBody.
package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	gh "github.com/google/go-github/v60/github"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
	"github.com/petri-dev/petri/sync/render"
)

// Limits of the endpoint when the Handler's fields are zero.
const (
	// DefaultMaxBody bounds one delivery's body. GitHub caps payloads at
	// 25 MB, but the events sync acts on are far smaller: a pull_request,
	// status or check_run payload is tens of KiB, a push of twenty commits
	// a few hundred. A larger delivery is refused with 413.
	DefaultMaxBody = 5 << 20
	// DefaultMaxConcurrent bounds the bodies read at once, before their
	// signature is known.
	DefaultMaxConcurrent = 8
	// DefaultReadTimeout bounds reading one body. GitHub gives up on a
	// delivery after 10 seconds, so a slower body is not GitHub's.
	DefaultReadTimeout = 10 * time.Second
)

// RetryAfter is the Retry-After of a 503 answer, in seconds.
const RetryAfter = "5"

// Event is one accepted delivery.
type Event struct {
	Type     string
	Delivery string
	Received time.Time
	// Forge is the forge that sent it (config.ForgeGitea, ...); empty for
	// GitHub.
	Forge string
	// Repository is the repository's path on its forge (owner/name).
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
	// Comment is the new comment of an issue_comment event on a pull
	// request that carries a command (a line starting with /petri).
	Comment *provider.Comment
	// MergeGroup is the merge group of a merge_group event.
	MergeGroup *MergeGroup
}

// MergeGroup is a merge group of GitHub's merge queue: the commit the queue
// built to test a pull request on its base, on which the queue waits for
// the required statuses (petri/<app> among them, where a branch's rules
// require it) before it merges.
type MergeGroup struct {
	// Destroyed is set when the group is gone (merged, invalidated,
	// dequeued): nothing more is posted on it. Unset: checks_requested.
	Destroyed bool
	// HeadSHA is the merge group's commit, where its statuses go; HeadRef
	// its branch (refs/heads/gh-readonly-queue/<base>/pr-<number>-<sha>)
	// and BaseRef the branch it merges into.
	HeadSHA, HeadRef, BaseRef string
	// Number is the pull request the group merges, read from HeadRef, and
	// PullRequestSHA the pull request's commit that was queued.
	Number         int
	PullRequestSHA string
}

// Handler is the webhook endpoint.
type Handler struct {
	// Secret is GitHub's webhook secret; every delivery must be signed
	// with it, but for those of a repository (or an owner) with a secret
	// of its own in RepositorySecrets, which must be signed with that one.
	Secret []byte
	// RepositorySecrets are secrets by repository or owner path, in lower
	// case (provider.WebhookSecrets).
	RepositorySecrets map[string][]byte
	// Forges read the deliveries of other forges at /webhooks/<forge>, by
	// the name applications give the forge (forges.go).
	Forges map[string]Forge
	// Queue receives accepted events; a full queue answers 503.
	Queue chan<- Event
	// Metrics counts deliveries; optional.
	Metrics *metrics.Metrics
	// MaxBody is the largest body accepted, in bytes; DefaultMaxBody when
	// zero.
	MaxBody int64
	// MaxConcurrent is how many bodies are read at once; a delivery that
	// finds them all taken is answered 503 at once.
	// DefaultMaxConcurrent when zero.
	MaxConcurrent int
	// ReadTimeout bounds reading one body (408 when it runs out);
	// DefaultReadTimeout when zero.
	ReadTimeout time.Duration
	// Clock dates each accepted event; the real one when nil.
	Clock clock.PassiveClock

	once     sync.Once
	slots    chan struct{}
	inFlight atomic.Int64
}

// wall is the real clock, for what the network counts in real time.
var wall = clock.RealClock{}

func (h *Handler) now() time.Time {
	if h.Clock == nil {
		return wall.Now()
	}
	return h.Clock.Now()
}

func (h *Handler) count(event, result string) {
	if h.Metrics != nil {
		h.Metrics.WebhookEvents.WithLabelValues(event, result).Inc()
	}
}

func (h *Handler) maxBody() int64 {
	if h.MaxBody > 0 {
		return h.MaxBody
	}
	return DefaultMaxBody
}

// acquire takes a reading slot without waiting; false when all are taken.
func (h *Handler) acquire() bool {
	h.once.Do(func() {
		n := h.MaxConcurrent
		if n <= 0 {
			n = DefaultMaxConcurrent
		}
		h.slots = make(chan struct{}, n)
	})
	select {
	case h.slots <- struct{}{}:
		h.setInFlight(h.inFlight.Add(1))
		return true
	default:
		return false
	}
}

func (h *Handler) release() {
	h.setInFlight(h.inFlight.Add(-1))
	<-h.slots
}

func (h *Handler) setInFlight(n int64) {
	if h.Metrics != nil {
		h.Metrics.WebhookReadsInFlight.Set(float64(n))
	}
}

// InFlight is the number of bodies being read and checked now.
func (h *Handler) InFlight() int { return int(h.inFlight.Load()) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f := r.PathValue("forge"); f != "" && f != config.ForgeGitHub {
		h.serveForge(w, r, f)
		return
	}
	if f := foreign(r.Header); f != "" {
		h.count("other", "wrong_path")
		http.Error(w, "a "+f+" delivery: send it to /webhooks/"+f, http.StatusBadRequest)
		return
	}
	received := h.now()
	event := r.Header.Get("X-GitHub-Event")
	metricEvent := event
	switch event {
	case "pull_request", "push", "status", "check_run", "issue_comment", "merge_group", "ping":
	default:
		metricEvent = "other"
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, ok := h.authenticated(w, r, metricEvent)
	if !ok {
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
	h.enqueue(w, ev, metricEvent)
}

// enqueue hands an accepted event to the queue, or answers 503 when it is
// full.
func (h *Handler) enqueue(w http.ResponseWriter, ev Event, metricEvent string) {
	select {
	case h.Queue <- ev:
		h.count(metricEvent, "queued")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "queued\n")
	default:
		h.count(metricEvent, "rejected")
		w.Header().Set("Retry-After", RetryAfter)
		http.Error(w, "queue full, retry later", http.StatusServiceUnavailable)
	}
}

// authenticated reads a delivery's body and checks its signature; what can
// be refused without reading the body is refused first. When it answers
// the delivery (a refusal) it returns false.
func (h *Handler) authenticated(w http.ResponseWriter, r *http.Request, metricEvent string) ([]byte, bool) {
	sig, ok := parseSignature(r.Header.Get("X-Hub-Signature-256"))
	secrets := provider.WebhookSecrets{Default: h.Secret, ByPath: h.RepositorySecrets}
	if secrets.Empty() || !ok {
		h.count(metricEvent, "unauthorized")
		// Closing the connection keeps the server from reading the body
		// to reuse it.
		w.Header().Set("Connection", "close")
		http.Error(w, "missing or invalid X-Hub-Signature-256", http.StatusUnauthorized)
		return nil, false
	}
	limit := h.maxBody()
	if r.ContentLength > limit {
		h.count(metricEvent, "too_large")
		w.Header().Set("Connection", "close")
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return nil, false
	}
	if !h.acquire() {
		h.count(metricEvent, "busy")
		w.Header().Set("Retry-After", RetryAfter)
		w.Header().Set("Connection", "close")
		http.Error(w, "too many deliveries being read, retry later", http.StatusServiceUnavailable)
		return nil, false
	}
	body, code, err := h.read(w, r, limit)
	if err == nil && !signedBy(sig, body, secrets) {
		code, err = http.StatusUnauthorized, errors.New("missing or invalid X-Hub-Signature-256")
	}
	h.release()
	if err != nil {
		result := map[int]string{http.StatusUnauthorized: "unauthorized", http.StatusRequestEntityTooLarge: "too_large", http.StatusRequestTimeout: "timeout"}[code]
		if result == "" {
			result = "malformed"
		}
		h.count(metricEvent, result)
		if code != http.StatusUnauthorized {
			w.Header().Set("Connection", "close")
		}
		http.Error(w, err.Error(), code)
		return nil, false
	}
	return body, true
}

// read reads the body within limit and the read timeout. On failure it
// returns the status to answer.
func (h *Handler) read(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int, error) {
	timeout := h.ReadTimeout
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	// Not every ResponseWriter has a connection (httptest.ResponseRecorder).
	// A connection's deadline is on the wall clock, whatever dates the
	// events.
	_ = http.NewResponseController(w).SetReadDeadline(wall.Now().Add(timeout))
	body, err := readBody(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return body, 0, nil
	case errors.As(err, &tooLarge):
		return nil, http.StatusRequestEntityTooLarge, errors.New("body too large")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, http.StatusRequestTimeout, errors.New("body not received in time")
	}
	return nil, http.StatusBadRequest, errors.New("body unreadable")
}

// parseSignature decodes "sha256=<64 hex digits>"; false for anything else.
func parseSignature(header string) ([]byte, bool) {
	hexsig, ok := strings.CutPrefix(header, "sha256=")
	if !ok || len(hexsig) != 2*sha256.Size {
		return nil, false
	}
	sig, err := hex.DecodeString(hexsig)
	return sig, err == nil
}

// signedBy checks sig against the secret of the repository the body names
// (a form-encoded body's payload too): only its name is read before, and
// a body that names none is checked with the forge-wide secret.
func signedBy(sig, body []byte, secrets provider.WebhookSecrets) bool {
	payload := body
	if bytes.HasPrefix(bytes.TrimSpace(body), []byte("payload=")) {
		if form, err := url.ParseQuery(string(body)); err == nil {
			payload = []byte(form.Get("payload"))
		}
	}
	var named struct {
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	_ = json.Unmarshal(payload, &named)
	secret := secrets.For(named.Repository.FullName)
	return len(secret) > 0 && hmac.Equal(sig, mac(body, secret))
}

// mac is the HMAC-SHA256 of body; compare with hmac.Equal, in constant
// time.
func mac(body, secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
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
