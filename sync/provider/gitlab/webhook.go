// GitLab's webhooks: the secret token check (X-Gitlab-Token) and the
// reading of merge request, note, pipeline and push hooks into provider
// types. A group hook sends the same kinds and payloads as a project hook,
// for every project of the group and its subgroups.

package gitlab

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/petri-dev/petri/sync/provider"
)

// Webhook headers GitLab sends. GitLab does not sign its deliveries: it
// sends the webhook's secret token as it is, in HeaderToken.
const (
	HeaderToken = "X-Gitlab-Token"
	HeaderEvent = "X-Gitlab-Event"
	// HeaderDelivery is the delivery's id (X-Gitlab-Event-UUID), the same
	// on a redelivery.
	HeaderDelivery = "X-Gitlab-Event-UUID"
)

// Hook kinds sync reads (X-Gitlab-Event). An internal note arrives as
// "Confidential Note Hook" and is read as EventNote.
const (
	EventMergeRequest = "Merge Request Hook"
	EventNote         = "Note Hook"
	EventPipeline     = "Pipeline Hook"
	EventPush         = "Push Hook"

	eventConfidentialNote = "Confidential Note Hook"
)

// ErrBadToken says a delivery's X-Gitlab-Token is missing or is not the
// webhook's secret token.
var ErrBadToken = errors.New("gitlab webhook token missing or wrong")

// ErrUnknownEvent says a delivery is of a kind sync does not read.
var ErrUnknownEvent = errors.New("gitlab webhook event not read by sync")

// ValidToken reports whether got (X-Gitlab-Token) is the secret, comparing
// in constant time: the token is the only proof a delivery is GitLab's. It
// compares digests of equal length, so that the time taken does not tell
// the secret's length either. An empty secret validates nothing.
func ValidToken(secret []byte, got string) bool {
	if len(secret) == 0 {
		return false
	}
	want, have := sha256.Sum256(secret), sha256.Sum256([]byte(got))
	return constantTimeCompare(want[:], have[:]) == 1
}

// constantTimeCompare is subtle.ConstantTimeCompare, which returns at once
// when its inputs' lengths differ; a test sees what it is given, digests of
// one length whatever the token's and the secret's.
var constantTimeCompare = subtle.ConstantTimeCompare

// TokenPresent reports whether a delivery's token (X-Gitlab-Token) is one
// of the configured secrets; one that is none of them is refused before
// its body is read.
func TokenPresent(h http.Header, secrets provider.WebhookSecrets) bool {
	token := h.Get(HeaderToken)
	return secrets.Any(func(secret []byte) bool { return ValidToken(secret, token) })
}

// Verified reports whether a delivery's token is the secret of the project
// its body names (secrets.For: its own, its nearest group's, else the
// forge-wide one), so that a project with a secret of its own is never
// accepted with another's.
func Verified(h http.Header, body []byte, secrets provider.WebhookSecrets) bool {
	var named struct {
		Project struct {
			Path string `json:"path_with_namespace"`
		} `json:"project"`
	}
	_ = json.Unmarshal(body, &named)
	return ValidToken(secrets.For(named.Project.Path), h.Get(HeaderToken))
}

// ReadVerified checks a delivery's token, then reads its body (at most
// limit bytes); it returns the hook kind and the body. A token that is none
// of the configured secrets is refused before the body is read
// (TokenPresent); once the body names its project, the token must be that
// project's secret (Verified). It serves a receiver of GitLab's hooks other
// than sync's webhook handler, which makes the same two checks around its
// own bounded read.
func ReadVerified(r *http.Request, secrets provider.WebhookSecrets, limit int64) (string, []byte, error) {
	if !TokenPresent(r.Header, secrets) {
		return "", nil, ErrBadToken
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return "", nil, fmt.Errorf("read gitlab webhook: %w", err)
	}
	if int64(len(body)) > limit {
		return "", nil, fmt.Errorf("gitlab webhook body over %d bytes", limit)
	}
	if !Verified(r.Header, body, secrets) {
		return "", nil, ErrBadToken
	}
	kind := r.Header.Get(HeaderEvent)
	if kind == eventConfidentialNote {
		kind = EventNote
	}
	return kind, body, nil
}

// Event is what sync reads of one delivery: what every forge sends
// (provider.Delivery: Kind is EventMergeRequest, EventNote, EventPipeline
// or EventPush; Action is GitLab's: open, update, close, reopen, merge for
// merge requests, create or update for notes, the pipeline's status for
// pipelines, push for pushes; the PullRequest of a merge request hook
// names its Author only when the sender is the author, GitLab naming the
// author by id alone, and a pipeline's names no head commit or labels)
// and what only GitLab does.
type Event struct {
	provider.Delivery
	// NewCommits says a merge request update brought new commits (GitLab
	// sends oldrev then); an update without is a change of title, labels,
	// draft or description.
	NewCommits bool
	// SHA is the commit a pipeline ran on, or the new head of a push.
	SHA string
	// Ref is a pipeline's ref or a push's (refs/heads/<branch>).
	Ref string
	// Pipeline is a pipeline hook's pipeline.
	Pipeline *Pipeline
}

// Pipeline is a pipeline as its hook tells it: enough to settle a gate
// without asking GitLab.
type Pipeline struct {
	ID int64
	// Name is the pipeline's workflow:name, empty when it has none.
	Name string
	// Status is GitLab's: created, pending, running, success, failed,
	// canceled, skipped, manual, ...
	Status string
	// Source is what started it: push, merge_request_event, web, ...
	Source string
	// Jobs are its jobs' names and statuses.
	Jobs []Job
}

// Job is one job of a pipeline hook.
type Job struct {
	Name   string
	Status string
}

// GateState is what a pipeline event says of a gate on its commit, and
// whether it says anything: a gate naming a job (CheckRun) by the job of
// that name, one naming a status context by a pipeline of that name. A
// gate it says nothing of is read through the API (GateState).
func (e Event) GateState(g provider.Gate) (provider.GateState, bool) {
	if e.Pipeline == nil {
		return "", false
	}
	var state provider.GateState
	switch {
	case g.CheckRun != "":
		found := false
		for _, j := range e.Pipeline.Jobs {
			if j.Name == g.CheckRun {
				state, _, _ = gateState("job", j.Name, j.Status, e.SHA)
				found = true
			}
		}
		if !found {
			return "", false
		}
	case g.StatusContext != "" && g.StatusContext == e.Pipeline.Name:
		state, _, _ = gateState("pipeline", e.Pipeline.Name, e.Pipeline.Status, e.SHA)
	default:
		return "", false
	}
	return state, true
}

// The payloads are read into the provider's own shapes, not the client's
// event types: GitLab writes times in two formats and some fields as null,
// and sync needs little of them.

type hookUser struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
}

type hookProject struct {
	ID                int64  `json:"id"`
	PathWithNamespace string `json:"path_with_namespace"`
}

type hookLabel struct {
	Title string `json:"title"`
}

type hookMergeRequest struct {
	ID              int64       `json:"id"`
	IID             int64       `json:"iid"`
	Title           string      `json:"title"`
	State           string      `json:"state"`
	Draft           *bool       `json:"draft"`
	WorkInProgress  *bool       `json:"work_in_progress"`
	SourceBranch    string      `json:"source_branch"`
	TargetBranch    string      `json:"target_branch"`
	SourceProjectID int64       `json:"source_project_id"`
	TargetProjectID int64       `json:"target_project_id"`
	AuthorID        int64       `json:"author_id"`
	URL             string      `json:"url"`
	CreatedAt       hookTime    `json:"created_at"`
	UpdatedAt       hookTime    `json:"updated_at"`
	Labels          []hookLabel `json:"labels"`
	LastCommit      *struct {
		ID string `json:"id"`
	} `json:"last_commit"`
	Action string `json:"action"`
	OldRev string `json:"oldrev"`
}

type mergeRequestPayload struct {
	ObjectKind       string           `json:"object_kind"`
	User             *hookUser        `json:"user"`
	Project          hookProject      `json:"project"`
	ObjectAttributes hookMergeRequest `json:"object_attributes"`
	Labels           []hookLabel      `json:"labels"`
}

type notePayload struct {
	User             *hookUser   `json:"user"`
	Project          hookProject `json:"project"`
	ObjectAttributes struct {
		ID           int64    `json:"id"`
		Note         string   `json:"note"`
		NoteableType string   `json:"noteable_type"`
		AuthorID     int64    `json:"author_id"`
		System       bool     `json:"system"`
		Action       string   `json:"action"`
		CreatedAt    hookTime `json:"created_at"`
		UpdatedAt    hookTime `json:"updated_at"`
	} `json:"object_attributes"`
	MergeRequest *hookMergeRequest `json:"merge_request"`
}

type pipelinePayload struct {
	User             *hookUser   `json:"user"`
	Project          hookProject `json:"project"`
	ObjectAttributes struct {
		ID     int64  `json:"id"`
		Name   string `json:"name"`
		Ref    string `json:"ref"`
		SHA    string `json:"sha"`
		Source string `json:"source"`
		Status string `json:"status"`
	} `json:"object_attributes"`
	MergeRequest *hookMergeRequest `json:"merge_request"`
	Builds       []Job             `json:"builds"`
}

type pushPayload struct {
	Before       string      `json:"before"`
	After        string      `json:"after"`
	Ref          string      `json:"ref"`
	UserUsername string      `json:"user_username"`
	Project      hookProject `json:"project"`
}

// ParseWebhook reads a merge request, note, pipeline or push hook's
// payload; other kinds are ErrUnknownEvent.
func ParseWebhook(kind string, body []byte) (Event, error) {
	switch kind {
	case EventMergeRequest:
		return parseMergeRequest(body)
	case EventNote, eventConfidentialNote:
		return parseNote(body)
	case EventPipeline:
		return parsePipeline(body)
	case EventPush:
		var p pushPayload
		if err := json.Unmarshal(body, &p); err != nil {
			return Event{}, fmt.Errorf("gitlab push hook: %w", err)
		}
		if p.Project.PathWithNamespace == "" {
			return Event{}, errors.New("gitlab push hook without project")
		}
		return Event{Delivery: provider.Delivery{Kind: EventPush, Action: "push", Repository: p.Project.PathWithNamespace, Sender: p.UserUsername},
			SHA: p.After, Ref: p.Ref}, nil
	}
	return Event{}, fmt.Errorf("%w: %q", ErrUnknownEvent, kind)
}

func parseMergeRequest(body []byte) (Event, error) {
	var p mergeRequestPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, fmt.Errorf("gitlab merge request hook: %w", err)
	}
	repo := p.Project.PathWithNamespace
	if repo == "" {
		return Event{}, errors.New("gitlab merge request hook without project")
	}
	mr := p.ObjectAttributes
	if len(mr.Labels) == 0 {
		mr.Labels = p.Labels
	}
	pr, err := hookPullRequest(repo, &mr, p.User)
	if err != nil {
		return Event{}, err
	}
	return Event{Delivery: provider.Delivery{Kind: EventMergeRequest, Action: mr.Action, Repository: repo, Sender: username(p.User), PullRequest: &pr},
		NewCommits: mr.Action == "update" && mr.OldRev != ""}, nil
}

func parseNote(body []byte) (Event, error) {
	var p notePayload
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, fmt.Errorf("gitlab note hook: %w", err)
	}
	repo := p.Project.PathWithNamespace
	if repo == "" {
		return Event{}, errors.New("gitlab note hook without project")
	}
	n := p.ObjectAttributes
	ev := Event{Delivery: provider.Delivery{Kind: EventNote, Action: n.Action, Repository: repo, Sender: username(p.User),
		IsPull: n.NoteableType == "MergeRequest"}}
	if ev.Action == "" {
		ev.Action = "create"
	}
	c := provider.Comment{ID: n.ID, Body: n.Note, CreatedAt: n.CreatedAt.Time, UpdatedAt: n.UpdatedAt.Time}
	if p.User != nil && (n.AuthorID == 0 || n.AuthorID == p.User.ID) {
		c.Author = p.User.Username
	}
	if ev.IsPull && p.MergeRequest != nil {
		pr, err := hookPullRequest(repo, p.MergeRequest, nil)
		if err != nil {
			return Event{}, err
		}
		ev.PullRequest = &pr
		c.Number = pr.Number
	}
	ev.Comment = &c
	return ev, nil
}

func parsePipeline(body []byte) (Event, error) {
	var p pipelinePayload
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, fmt.Errorf("gitlab pipeline hook: %w", err)
	}
	repo := p.Project.PathWithNamespace
	if repo == "" {
		return Event{}, errors.New("gitlab pipeline hook without project")
	}
	a := p.ObjectAttributes
	ev := Event{Delivery: provider.Delivery{Kind: EventPipeline, Action: a.Status, Repository: repo, Sender: username(p.User)}, SHA: a.SHA, Ref: a.Ref,
		Pipeline: &Pipeline{ID: a.ID, Name: a.Name, Status: a.Status, Source: a.Source, Jobs: p.Builds}}
	if p.MergeRequest != nil {
		pr, err := hookPullRequest(repo, p.MergeRequest, nil)
		if err != nil {
			return Event{}, err
		}
		ev.PullRequest = &pr
	}
	return ev, nil
}

// hookPullRequest reads a hook's merge request. Its number is its IID, or,
// when a payload lacks it, read from the end of its URL
// (…/merge_requests/7); its state, when a payload lacks it, follows from
// the action. sender, when it is the author, names the author.
func hookPullRequest(repo string, mr *hookMergeRequest, sender *hookUser) (provider.PullRequest, error) {
	n := int(mr.IID)
	if n == 0 {
		n = numberOf(mr.URL)
	}
	if n == 0 {
		return provider.PullRequest{}, errors.New("gitlab hook's merge request without iid")
	}
	st := strings.TrimSpace(mr.State)
	if st == "" {
		switch mr.Action {
		case "merge":
			st = "merged"
		case "close":
			st = "closed"
		default:
			st = "opened"
		}
	}
	pr := provider.PullRequest{
		Repository: repo, Number: n, State: state(st), Merged: st == "merged",
		Draft: (mr.Draft != nil && *mr.Draft) || (mr.WorkInProgress != nil && *mr.WorkInProgress),
		Title: mr.Title, HeadBranch: mr.SourceBranch, BaseBranch: mr.TargetBranch, URL: mr.URL,
		CreatedAt: mr.CreatedAt.Time, UpdatedAt: mr.UpdatedAt.Time,
		Fork: mr.SourceProjectID != mr.TargetProjectID,
	}
	if mr.LastCommit != nil {
		pr.HeadSHA = mr.LastCommit.ID
	}
	for _, l := range mr.Labels {
		pr.Labels = append(pr.Labels, l.Title)
	}
	if sender != nil && mr.AuthorID != 0 && sender.ID == mr.AuthorID {
		pr.Author = sender.Username
	}
	return pr, nil
}

// numberOf reads the number at the end of a merge request's URL; 0 when
// there is none.
func numberOf(u string) int {
	u = strings.TrimSuffix(u, "/")
	n, err := strconv.Atoi(u[strings.LastIndex(u, "/")+1:])
	if err != nil {
		return 0
	}
	return n
}

func username(u *hookUser) string {
	if u == nil {
		return ""
	}
	return u.Username
}

// hookTime reads the times of GitLab's hooks, written as RFC 3339
// (2013-12-03T17:23:34Z) or as "2015-05-17 18:21:36 UTC"; null or empty
// is the zero time.
type hookTime struct{ time.Time }

var hookTimeLayouts = []string{time.RFC3339, "2006-01-02 15:04:05 MST", "2006-01-02 15:04:05 -0700"}

func (t *hookTime) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("gitlab hook time: %w", err)
	}
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	for _, layout := range hookTimeLayouts {
		if parsed, err := time.Parse(layout, s); err == nil {
			t.Time = parsed.UTC()
			return nil
		}
	}
	return fmt.Errorf("gitlab hook time %q: unknown format", s)
}
