package githubapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

//go:embed testdata/*/*.json
var payloads embed.FS

var deliveries atomic.Int64

// Payload returns one of GitHub's example payloads, such as
// ("pull_request", "opened") or ("push", "").
func Payload(event, action string) ([]byte, error) {
	name := event + "/payload.json"
	if action != "" {
		name = event + "/" + action + ".payload.json"
	}
	return payloads.ReadFile("testdata/" + name)
}

// Sign returns the X-Hub-Signature-256 value of a body, as GitHub computes it.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Delivery is one webhook delivery: the event type and the JSON body.
type Delivery struct {
	Event string
	Body  []byte
	// ID is the X-GitHub-Delivery GUID; each Send makes a new one when it
	// is empty (Identified fixes it, so a send again is a replay).
	ID string
}

// Send posts the delivery to url, signed with secret (unsigned when secret is
// nil), the way GitHub delivers webhooks.
func (d Delivery) Send(ctx context.Context, client *http.Client, url string, secret []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", d.Event)
	id := d.ID
	if id == "" {
		id = newDeliveryID()
	}
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("User-Agent", "GitHub-Hookshot/githubapi")
	if secret != nil {
		req.Header.Set("X-Hub-Signature-256", Sign(secret, d.Body))
	}
	if client == nil {
		client = http.DefaultClient
	}
	return client.Do(req)
}

func patchRepository(p map[string]any, repository string) {
	owner, name, _ := strings.Cut(repository, "/")
	r, _ := p["repository"].(map[string]any)
	if r == nil {
		return
	}
	r["full_name"] = repository
	r["name"] = name
	r["html_url"] = "https://github.com/" + repository
	r["clone_url"] = "https://github.com/" + repository + ".git"
	r["ssh_url"] = "git@github.com:" + repository + ".git"
	if o, ok := r["owner"].(map[string]any); ok {
		o["login"] = owner
		o["name"] = owner
	}
}

func marshal(event string, p map[string]any) (Delivery, error) {
	body, err := json.Marshal(p)
	return Delivery{Event: event, Body: body}, err
}

// parsedPayloads holds each example payload parsed once: a delivery is
// built from a copy, so that a sender of many webhooks (make bench sends 50
// a second) does not spend its CPU, and the measured program's, parsing
// the same JSON again.
var parsedPayloads sync.Map

func load(event, action string) (map[string]any, error) {
	key := event + "/" + action
	if p, ok := parsedPayloads.Load(key); ok {
		return copyJSON(p.(map[string]any)).(map[string]any), nil
	}
	raw, err := Payload(event, action)
	if err != nil {
		return nil, err
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	parsedPayloads.Store(key, p)
	return copyJSON(p).(map[string]any), nil
}

// copyJSON deep-copies a value decoded from JSON into any.
func copyJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = copyJSON(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = copyJSON(x)
		}
		return out
	default:
		// Strings, numbers, booleans and nil are values.
		return v
	}
}

// PullRequestEvent builds a pull_request delivery from GitHub's example
// payload for action, describing the server's current state of the pull
// request.
func (s *Server) PullRequestEvent(repository string, number int, action string) (Delivery, error) {
	s.mu.Lock()
	prp := s.repo(repository).prs[number]
	if prp == nil {
		s.mu.Unlock()
		return Delivery{}, fmt.Errorf("%w: %s#%d", ErrNoSuchPullRequest, repository, number)
	}
	pr := *prp
	s.mu.Unlock()
	p, err := load("pull_request", action)
	if err != nil {
		return Delivery{}, err
	}
	p["number"] = pr.Number
	patchRepository(p, repository)
	src := p["pull_request"].(map[string]any)
	for k, v := range pullJSON(pr) {
		if k == "head" || k == "base" || k == "user" {
			dst := src[k].(map[string]any)
			for kk, vv := range v.(map[string]any) {
				if kk == "repo" {
					continue
				}
				dst[kk] = vv
			}
			continue
		}
		src[k] = v
	}
	if !pr.Merged {
		src["merged_at"] = nil
	}
	if pr.State == "open" {
		src["closed_at"] = nil
	}
	if r, ok := src["base"].(map[string]any)["repo"].(map[string]any); ok {
		r["full_name"] = repository
	}
	if r, ok := src["head"].(map[string]any)["repo"].(map[string]any); ok {
		for k, v := range headRepoJSON(pr) {
			r[k] = v
		}
	}
	return marshal("pull_request", p)
}

// CheckRunEvent builds a check_run delivery (completed when the run is
// completed, created otherwise) for a check run on a pull request's commit.
func (s *Server) CheckRunEvent(repository string, number int, sha string, run CheckRun) (Delivery, error) {
	action := "created"
	if run.Status == "completed" {
		action = "completed"
	}
	p, err := load("check_run", action)
	if err != nil {
		return Delivery{}, err
	}
	patchRepository(p, repository)
	cr := p["check_run"].(map[string]any)
	cr["name"] = run.Name
	cr["status"] = run.Status
	cr["head_sha"] = sha
	app, _ := cr["app"].(map[string]any)
	if app == nil {
		app = map[string]any{}
	}
	app["slug"] = checkApp(run)
	cr["app"] = app
	if run.Conclusion != "" {
		cr["conclusion"] = run.Conclusion
	} else {
		cr["conclusion"] = nil
	}
	if prs, ok := cr["pull_requests"].([]any); ok && len(prs) > 0 {
		first := prs[0].(map[string]any)
		first["number"] = number
		cr["pull_requests"] = []any{first}
	}
	if cs, ok := cr["check_suite"].(map[string]any); ok {
		cs["head_sha"] = sha
	}
	return marshal("check_run", p)
}

// StatusEvent builds a status delivery for a commit status.
func (s *Server) StatusEvent(repository, sha, context, state string) (Delivery, error) {
	p, err := load("status", "")
	if err != nil {
		return Delivery{}, err
	}
	patchRepository(p, repository)
	p["sha"] = sha
	p["context"] = context
	p["state"] = state
	if c, ok := p["commit"].(map[string]any); ok {
		c["sha"] = sha
	}
	return marshal("status", p)
}

// MergeGroupEvent builds a merge_group delivery of action (checks_requested
// or destroyed) for a merge group of GitHub's merge queue: its commit sha,
// merging pull request number, queued at the pull request's commit prSHA,
// into base.
func MergeGroupEvent(repository, base string, number int, prSHA, sha, action string) (Delivery, error) {
	p, err := load("merge_group", action)
	if err != nil {
		return Delivery{}, err
	}
	patchRepository(p, repository)
	g := p["merge_group"].(map[string]any)
	g["head_sha"] = sha
	g["head_ref"] = fmt.Sprintf("refs/heads/gh-readonly-queue/%s/pr-%d-%s", base, number, prSHA)
	g["base_ref"] = "refs/heads/" + base
	if hc, ok := g["head_commit"].(map[string]any); ok {
		hc["id"] = sha
	}
	return marshal("merge_group", p)
}

// PushEvent builds a push delivery of a branch to a repository.
func PushEvent(repository, branch, sha string) (Delivery, error) {
	p, err := load("push", "")
	if err != nil {
		return Delivery{}, err
	}
	patchRepository(p, repository)
	p["ref"] = "refs/heads/" + branch
	p["after"] = sha
	p["created"] = false
	p["deleted"] = false
	if hc, ok := p["head_commit"].(map[string]any); ok && hc != nil {
		hc["id"] = sha
	}
	return marshal("push", p)
}

// Event builds a delivery of any example payload unchanged, such as
// ("ping", "") or ("pull_request", "assigned").
func Event(event, action string) (Delivery, error) {
	raw, err := Payload(event, action)
	return Delivery{Event: event, Body: raw}, err
}

// IssueCommentEvent builds an issue_comment delivery (action created) for a
// comment on a pull request, describing the server's state of both.
func (s *Server) IssueCommentEvent(repository string, number int, commentID int64) (Delivery, error) {
	s.mu.Lock()
	r := s.repo(repository)
	prp := r.prs[number]
	var c *Comment
	for _, cc := range r.comments[number] {
		if cc.ID == commentID {
			c = cc
		}
	}
	if prp == nil || c == nil {
		s.mu.Unlock()
		return Delivery{}, fmt.Errorf("%w: comment %d on %s#%d", ErrNoSuchPullRequest, commentID, repository, number)
	}
	pr, comment := *prp, *c
	s.mu.Unlock()
	return issueCommentDelivery(repository, pr, comment, "created", nil)
}

// issueCommentDelivery builds an issue_comment delivery of action for a
// comment on a pull request; extra fields (such as changes) are added at
// the top level.
func issueCommentDelivery(repository string, pr PullRequest, comment Comment, action string, extra map[string]any) (Delivery, error) {
	p, err := load("issue_comment", "created")
	if err != nil {
		return Delivery{}, err
	}
	p["action"] = action
	for k, v := range extra {
		p[k] = v
	}
	patchRepository(p, repository)
	number := pr.Number
	pj := pullJSON(pr)
	issue := p["issue"].(map[string]any)
	for _, k := range []string{"number", "title", "state", "labels", "user", "created_at", "updated_at", "draft"} {
		issue[k] = pj[k]
	}
	html := pj["html_url"].(string)
	issue["html_url"] = html
	issue["url"] = fmt.Sprintf("https://api.github.com/repos/%s/issues/%d", repository, number)
	issue["repository_url"] = "https://api.github.com/repos/" + repository
	issue["comments_url"] = fmt.Sprintf("https://api.github.com/repos/%s/issues/%d/comments", repository, number)
	issue["pull_request"] = map[string]any{
		"url": fmt.Sprintf("https://api.github.com/repos/%s/pulls/%d", repository, number), "html_url": html,
		"diff_url": html + ".diff", "patch_url": html + ".patch", "merged_at": pj["merged_at"],
	}
	cj := commentJSON(repository, comment)
	dst := p["comment"].(map[string]any)
	for k, v := range cj {
		if k == "user" {
			u := dst["user"].(map[string]any)
			for kk, vv := range v.(map[string]any) {
				u[kk] = vv
			}
			continue
		}
		dst[k] = v
	}
	p["sender"] = dst["user"]
	return marshal("issue_comment", p)
}
