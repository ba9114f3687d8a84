package gitea

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// adminScopes are the administrator token's scopes: everything the helpers
// do.
var adminScopes = []string{
	"write:admin", "write:organization", "write:repository", "write:issue", "write:user", "write:misc", "write:notification",
}

// userScopes are a user's token scopes: its repositories, issues and pull
// requests, and its own profile (GET /api/v1/user).
var userScopes = []string{"write:repository", "write:issue", "write:user", "read:organization"}

// APIError is an answer of Gitea's API outside 2xx.
type APIError struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("gitea %s %s: %d %s", e.Method, e.Path, e.Status, e.Message)
}

// Call sends a request to Gitea's API (path below /api/v1) as a user (the
// administrator when as is nil), encoding in as JSON when not nil and
// decoding the answer into out when not nil.
func (s *Server) Call(as *User, method, path string, in, out any) error {
	if as == nil {
		as = &s.Admin
	}
	return s.call(method, path, in, out, func(r *http.Request) {
		if as.Token != "" {
			r.Header.Set("Authorization", "token "+as.Token)
		} else {
			r.SetBasicAuth(as.Name, as.Password)
		}
	})
}

func (s *Server) call(method, path string, in, out any, auth func(*http.Request)) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.URL+"/api/v1"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	auth(req)
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("gitea %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("gitea %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var msg struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &msg)
		if msg.Message == "" {
			msg.Message = http.StatusText(resp.StatusCode)
		}
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Message: msg.Message}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("gitea %s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// createToken asks for an access token with basic auth, as a person would
// in Gitea's settings.
func (s *Server) createToken(u User, name string, scopes []string) (string, error) {
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	err := s.call(http.MethodPost, "/users/"+url.PathEscape(u.Name)+"/tokens",
		map[string]any{"name": name, "scopes": scopes}, &tok,
		func(r *http.Request) { r.SetBasicAuth(u.Name, u.Password) })
	if err != nil {
		return "", fmt.Errorf("create access token of %s: %w", u.Name, err)
	}
	if tok.SHA1 == "" {
		return "", fmt.Errorf("create access token of %s: gitea answered no token", u.Name)
	}
	return tok.SHA1, nil
}

// CreateToken makes another access token of a user, with the given scopes
// only (Gitea's names: write:repository, read:user, ...).
func (s *Server) CreateToken(u User, name string, scopes ...string) (string, error) {
	return s.createToken(u, name, scopes)
}

// CreateUser creates a user (as the administrator) with a random password
// and an access token for its repositories, issues and profile.
func (s *Server) CreateUser(name string) (User, error) {
	password, err := randomHex(16)
	if err != nil {
		return User{}, err
	}
	u := User{Name: name, Password: password}
	if err := s.Call(nil, http.MethodPost, "/admin/users", map[string]any{
		"username": name, "email": name + "@example.com", "password": password,
		"must_change_password": false, "send_notify": false,
	}, nil); err != nil {
		return User{}, fmt.Errorf("create user %s: %w", name, err)
	}
	if u.Token, err = s.createToken(u, "petri", userScopes); err != nil {
		return User{}, err
	}
	return u, nil
}

// CreateOrg creates an organisation owned by the administrator.
func (s *Server) CreateOrg(name string) error {
	if err := s.Call(nil, http.MethodPost, "/orgs", map[string]any{"username": name, "visibility": "public"}, nil); err != nil {
		return fmt.Errorf("create organisation %s: %w", name, err)
	}
	return nil
}

// CreateRepository creates an empty public repository (default branch
// main) of a user or an organisation; repository is owner/name.
func (s *Server) CreateRepository(repository string) error {
	owner, name, err := split(repository)
	if err != nil {
		return err
	}
	if err := s.Call(nil, http.MethodPost, "/admin/users/"+url.PathEscape(owner)+"/repos", map[string]any{
		"name": name, "private": false, "default_branch": "main", "auto_init": false,
	}, nil); err != nil {
		return fmt.Errorf("create repository %s: %w", repository, err)
	}
	return nil
}

// Fork forks repository into the user's account and returns the fork's
// owner/name.
func (s *Server) Fork(as User, repository string) (string, error) {
	var out struct {
		FullName string `json:"full_name"`
	}
	if err := s.Call(&as, http.MethodPost, "/repos/"+repository+"/forks", map[string]any{}, &out); err != nil {
		return "", fmt.Errorf("fork %s as %s: %w", repository, as.Name, err)
	}
	return out.FullName, nil
}

// AddCollaborator gives a user read, write or admin permission on a
// repository.
func (s *Server) AddCollaborator(repository, user, permission string) error {
	if err := s.Call(nil, http.MethodPut, "/repos/"+repository+"/collaborators/"+url.PathEscape(user),
		map[string]any{"permission": permission}, nil); err != nil {
		return fmt.Errorf("add %s to %s with %s: %w", user, repository, permission, err)
	}
	return nil
}

// PullRequest is what opening a pull request takes. Head is a branch of the
// repository, or owner/name:branch for a fork's (Gitea answers 404 to
// owner:branch).
type PullRequest struct {
	Head, Base  string
	Title, Body string
	// As opens it; the administrator when nil.
	As *User
}

// OpenPullRequest opens a pull request and returns its number.
func (s *Server) OpenPullRequest(repository string, pr PullRequest) (int, error) {
	if pr.Base == "" {
		pr.Base = "main"
	}
	var out struct {
		Number int `json:"number"`
	}
	if err := s.Call(pr.As, http.MethodPost, "/repos/"+repository+"/pulls", map[string]any{
		"head": pr.Head, "base": pr.Base, "title": pr.Title, "body": pr.Body,
	}, &out); err != nil {
		return 0, fmt.Errorf("open pull request %s from %s: %w", repository, pr.Head, err)
	}
	return out.Number, nil
}

// EditPullRequest changes a pull request's title (when not empty) and state
// ("open", "closed"; unchanged when empty).
func (s *Server) EditPullRequest(repository string, number int, title, state string) error {
	body := map[string]any{}
	if title != "" {
		body["title"] = title
	}
	if state != "" {
		body["state"] = state
	}
	if err := s.Call(nil, http.MethodPatch, fmt.Sprintf("/repos/%s/pulls/%d", repository, number), body, nil); err != nil {
		return fmt.Errorf("edit pull request %s#%d: %w", repository, number, err)
	}
	return nil
}

// ClosePullRequest closes a pull request without merging it.
func (s *Server) ClosePullRequest(repository string, number int) error {
	return s.EditPullRequest(repository, number, "", "closed")
}

// ReopenPullRequest reopens a closed pull request.
func (s *Server) ReopenPullRequest(repository string, number int) error {
	return s.EditPullRequest(repository, number, "", "open")
}

// MergePullRequest merges a pull request with a merge commit. Gitea checks
// whether a pull request can be merged in the background after each push;
// until it has, it answers "Please try again later", so the merge is asked
// again for up to thirty seconds. Any other refusal (work in progress,
// conflicts) is returned at once.
func (s *Server) MergePullRequest(repository string, number int) error {
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.Call(nil, http.MethodPost, fmt.Sprintf("/repos/%s/pulls/%d/merge", repository, number),
			map[string]any{"Do": "merge"}, nil)
		var apiErr *APIError
		retry := errors.As(err, &apiErr) && apiErr.Status == http.StatusMethodNotAllowed &&
			strings.Contains(apiErr.Message, "try again later") && time.Now().Before(deadline)
		if !retry {
			if err != nil {
				return fmt.Errorf("merge pull request %s#%d: %w", repository, number, err)
			}
			return nil
		}
		<-tick.C
	}
}

// AddLabels puts labels on a pull request (or issue) as the
// administrator, creating the ones the repository lacks.
func (s *Server) AddLabels(repository string, number int, labels ...string) error {
	return s.AddLabelsAs(nil, repository, number, labels...)
}

// AddLabelsAs puts labels on a pull request (or issue) as a user (the
// administrator when nil), creating the ones the repository lacks: the
// pull request's timeline names that user.
func (s *Server) AddLabelsAs(as *User, repository string, number int, labels ...string) error {
	var ids []int64
	for _, l := range labels {
		id, err := s.labelID(repository, l)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := s.Call(as, http.MethodPost, fmt.Sprintf("/repos/%s/issues/%d/labels", repository, number),
		map[string]any{"labels": ids}, nil); err != nil {
		return fmt.Errorf("label %s#%d: %w", repository, number, err)
	}
	return nil
}

// RemoveLabel takes a label off a pull request (or issue) as a user (the
// administrator when nil).
func (s *Server) RemoveLabel(as *User, repository string, number int, label string) error {
	id, err := s.labelID(repository, label)
	if err != nil {
		return err
	}
	if err := s.Call(as, http.MethodDelete, fmt.Sprintf("/repos/%s/issues/%d/labels/%d", repository, number, id), nil, nil); err != nil {
		return fmt.Errorf("unlabel %s#%d: %w", repository, number, err)
	}
	return nil
}

// labelID is the id of a repository's label, created when it lacks it.
func (s *Server) labelID(repository, label string) (int64, error) {
	var existing []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	if err := s.Call(nil, http.MethodGet, "/repos/"+repository+"/labels?limit=50", nil, &existing); err != nil {
		return 0, fmt.Errorf("list labels of %s: %w", repository, err)
	}
	for _, e := range existing {
		if e.Name == label {
			return e.ID, nil
		}
	}
	var created struct {
		ID int64 `json:"id"`
	}
	if err := s.Call(nil, http.MethodPost, "/repos/"+repository+"/labels",
		map[string]any{"name": label, "color": "#0e8a16"}, &created); err != nil {
		return 0, fmt.Errorf("create label %s on %s: %w", label, repository, err)
	}
	return created.ID, nil
}

// Comment writes a comment on a pull request (or issue) as a user (the
// administrator when nil) and returns its id.
func (s *Server) Comment(as *User, repository string, number int, body string) (int64, error) {
	var out struct {
		ID int64 `json:"id"`
	}
	if err := s.Call(as, http.MethodPost, fmt.Sprintf("/repos/%s/issues/%d/comments", repository, number),
		map[string]any{"body": body}, &out); err != nil {
		return 0, fmt.Errorf("comment on %s#%d: %w", repository, number, err)
	}
	return out.ID, nil
}

// EditComment changes a comment's body as a user (the administrator when
// nil): Gitea sends issue_comment with action edited.
func (s *Server) EditComment(as *User, repository string, id int64, body string) error {
	if err := s.Call(as, http.MethodPatch, fmt.Sprintf("/repos/%s/issues/comments/%d", repository, id),
		map[string]any{"body": body}, nil); err != nil {
		return fmt.Errorf("edit comment %d on %s: %w", id, repository, err)
	}
	return nil
}

// DeleteComment deletes a comment as a user (the administrator when nil):
// Gitea sends issue_comment with action deleted.
func (s *Server) DeleteComment(as *User, repository string, id int64) error {
	if err := s.Call(as, http.MethodDelete, fmt.Sprintf("/repos/%s/issues/comments/%d", repository, id), nil, nil); err != nil {
		return fmt.Errorf("delete comment %d on %s: %w", id, repository, err)
	}
	return nil
}

// SetStatus posts a commit status as the administrator: what a CI system
// reports, for the gate.
func (s *Server) SetStatus(repository, sha, context, state string) error {
	if err := s.Call(nil, http.MethodPost, "/repos/"+repository+"/statuses/"+sha, map[string]any{
		"context": context, "state": state, "description": context + " " + state,
	}, nil); err != nil {
		return fmt.Errorf("set status %s on %s@%s: %w", context, repository, sha, err)
	}
	return nil
}

// Webhook is a repository webhook of Gitea's own kind: JSON bodies signed
// with Secret (X-Gitea-Signature).
type Webhook struct {
	URL    string
	Secret string
	// Events are Gitea's event names; pull_request, pull_request_sync,
	// pull_request_label, issue_comment and pull_request_comment when
	// empty.
	Events []string
}

// CreateWebhook registers a webhook on a repository and returns its id.
func (s *Server) CreateWebhook(repository string, h Webhook) (int64, error) {
	events := h.Events
	if len(events) == 0 {
		events = []string{"pull_request", "pull_request_sync", "pull_request_label", "issue_comment", "pull_request_comment"}
	}
	var out struct {
		ID int64 `json:"id"`
	}
	if err := s.Call(nil, http.MethodPost, "/repos/"+repository+"/hooks", map[string]any{
		"type":          "gitea",
		"active":        true,
		"branch_filter": "*",
		"events":        events,
		"config":        map[string]string{"url": h.URL, "content_type": "json", "secret": h.Secret},
	}, &out); err != nil {
		return 0, fmt.Errorf("create webhook on %s: %w", repository, err)
	}
	return out.ID, nil
}

func split(repository string) (string, string, error) {
	owner, name, ok := strings.Cut(repository, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q is not owner/name", repository)
	}
	return owner, name, nil
}
