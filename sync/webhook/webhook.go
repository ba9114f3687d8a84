// Package webhook receives the forges' webhook deliveries, through one
// intake for every forge (GitHub's in github.go, the others' in forges.go):
// it checks a delivery's signature (or token) with the secret of the
// repository it names, in constant time, before acting on anything in the
// body, turns the events sync cares about into small Event values, and
// hands them to a bounded queue: the answer is immediate, and 503 tells the
// forge to retry when the queue is full.
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
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
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

// Handler is the webhook endpoint: each forge's deliveries at
// /webhooks/<forge> (its path value "forge"), GitHub's where the path names
// no forge.
type Handler struct {
	// Secret is GitHub's webhook secret; every delivery must be signed
	// with it, but for those of a repository (or an owner) with a secret
	// of its own in RepositorySecrets, which must be signed with that one.
	// GitHub is GitHub(Secret, RepositorySecrets) unless Forges has it.
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

// ServeHTTP implements http.Handler: every forge's delivery takes the same
// way, its forge named by the path (GitHub's when it names none).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("forge")
	if name == "" {
		name = config.ForgeGitHub
	}
	f, ok := h.forge(name)
	if !ok {
		h.count("other", "unknown_forge")
		http.Error(w, "sync serves no forge "+name, http.StatusNotFound)
		return
	}
	received := h.now()
	if other := f.misrouted(r.Header); other != "" {
		h.count("other", "wrong_path")
		http.Error(w, "a "+other+" delivery: send it to /webhooks/"+other, http.StatusBadRequest)
		return
	}
	kind := r.Header.Get(f.EventHeader)
	metricEvent := f.metricEvent(name, kind)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, ok := h.authenticated(w, r, f, metricEvent)
	if !ok {
		return
	}
	ev, err := f.Convert(Delivery{Kind: kind, Header: r.Header, Body: body})
	switch {
	case errors.Is(err, ErrIgnored):
		h.count(metricEvent, "ignored")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "event ignored\n")
		return
	case errors.Is(err, ErrNoWork):
		h.count(metricEvent, "ignored")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "nothing to do\n")
		return
	case err != nil:
		h.count(metricEvent, "malformed")
		http.Error(w, "malformed payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	ev.Delivery, ev.Received = r.Header.Get(f.DeliveryHeader), received
	h.enqueue(w, ev, metricEvent)
}

// forge is the forge of a name: GitHub's from the handler's secrets unless
// Forges has it.
func (h *Handler) forge(name string) (Forge, bool) {
	if f, ok := h.Forges[name]; ok {
		return f, true
	}
	if name == config.ForgeGitHub {
		return GitHub(h.Secret, h.RepositorySecrets), true
	}
	return Forge{}, false
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

// authenticated reads a delivery's body and checks its signature with the
// forge's secrets; what can be refused without reading the body (no
// secret, no credential that may be right, a declared length over the
// limit, every reading slot taken) is refused first. When it answers the
// delivery (a refusal) it returns false.
func (h *Handler) authenticated(w http.ResponseWriter, r *http.Request, f Forge, metricEvent string) ([]byte, bool) {
	refuse := func(code int, result, msg string) ([]byte, bool) {
		h.count(metricEvent, result)
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", RetryAfter)
		}
		// Closing the connection keeps the server from reading the body
		// to reuse it.
		w.Header().Set("Connection", "close")
		http.Error(w, msg, code)
		return nil, false
	}
	secrets := f.secrets()
	limit := h.maxBody()
	switch {
	case secrets.Empty():
		return refuse(http.StatusUnauthorized, "unauthorized", "no webhook secret for this forge")
	case !f.Presented(r.Header, secrets):
		return refuse(http.StatusUnauthorized, "unauthorized", "missing or invalid "+f.SignatureHeader)
	case r.ContentLength > limit:
		return refuse(http.StatusRequestEntityTooLarge, "too_large", "body too large")
	case !h.acquire():
		return refuse(http.StatusServiceUnavailable, "busy", "too many deliveries being read, retry later")
	}
	body, code, err := h.read(w, r, limit)
	if err == nil && !f.Verified(r.Header, body, secrets) {
		code, err = http.StatusUnauthorized, errors.New("missing or invalid "+f.SignatureHeader)
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
