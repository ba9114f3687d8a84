package githubapi

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// PullRequest is the server's state of one pull request.
type PullRequest struct {
	Number     int
	Title      string
	Author     string
	HeadRef    string
	HeadSHA    string
	BaseRef    string
	Labels     []string
	Draft      bool
	State      string // open or closed
	Merged     bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Repository string
	// HeadRepository is the repository the head branch is in: a fork's
	// full name for a pull request from a fork; empty for the repository
	// itself (see forks.go).
	HeadRepository string
}

// OpenPullRequest adds an open pull request (defaults filled in) and returns it.
func (s *Server) OpenPullRequest(repository string, pr PullRequest) PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(repository)
	if pr.Number == 0 {
		pr.Number = len(r.prs) + 1
		for r.prs[pr.Number] != nil {
			pr.Number++
		}
	}
	if pr.State == "" {
		pr.State = "open"
	}
	if pr.Author == "" {
		pr.Author = "octocat"
	}
	if pr.Title == "" {
		pr.Title = fmt.Sprintf("Change number %d", pr.Number)
	}
	if pr.HeadRef == "" {
		pr.HeadRef = fmt.Sprintf("feature/change-%d", pr.Number)
	}
	if pr.BaseRef == "" {
		pr.BaseRef = "main"
	}
	if pr.HeadSHA == "" {
		pr.HeadSHA = SHA(fmt.Sprintf("%s#%d", repository, pr.Number))
	}
	now := s.now().UTC().Truncate(time.Second)
	pr.CreatedAt, pr.UpdatedAt = now, now
	pr.Repository = repository
	r.prs[pr.Number] = &pr
	return pr
}

// UpdatePullRequest changes a pull request and bumps its updated_at.
func (s *Server) UpdatePullRequest(repository string, number int, change func(*PullRequest)) PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.repo(repository).prs[number]
	if pr == nil {
		panic(fmt.Sprintf("githubapi: no pull request %s#%d", repository, number))
	}
	change(pr)
	// updated_at has a resolution of one second on GitHub; keep it strictly
	// increasing so that ordering by it works in tests that move fast.
	next := s.now().UTC().Truncate(time.Second)
	if !next.After(pr.UpdatedAt) {
		next = pr.UpdatedAt.Add(time.Second)
	}
	pr.UpdatedAt = next
	return *pr
}

// PullRequest returns the state of one pull request.
func (s *Server) PullRequest(repository string, number int) PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.repo(repository).prs[number]
}

// LookupPullRequest returns the state of one pull request; false when there
// is none (PullRequest panics then).
func (s *Server) LookupPullRequest(repository string, number int) (PullRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.repo(repository).prs[number]
	if pr == nil {
		return PullRequest{}, false
	}
	return *pr, true
}

func (s *Server) listPulls(w http.ResponseWriter, r *http.Request, repository string, empty bool) {
	state := r.URL.Query().Get("state")
	if state == "" {
		state = "open"
	}
	s.mu.Lock()
	var prs []PullRequest
	if !empty {
		for _, pr := range s.repo(repository).prs {
			if state == "all" || pr.State == state {
				prs = append(prs, *pr)
			}
		}
	}
	s.mu.Unlock()
	// GitHub's default order: newest first.
	sort.Slice(prs, func(i, j int) bool { return prs[i].Number > prs[j].Number })
	out := make([]any, 0, len(prs))
	for _, pr := range prs {
		out = append(out, pullJSON(pr))
	}
	s.paginate(w, r, out)
}

func pullJSON(pr PullRequest) map[string]any {
	labels := []any{}
	for i, l := range pr.Labels {
		labels = append(labels, map[string]any{"id": i + 1, "name": l})
	}
	owner := strings.Split(pr.Repository, "/")[0]
	html := fmt.Sprintf("https://github.com/%s/pull/%d", pr.Repository, pr.Number)
	out := map[string]any{
		"number":     pr.Number,
		"state":      pr.State,
		"title":      pr.Title,
		"draft":      pr.Draft,
		"merged":     pr.Merged,
		"html_url":   html,
		"user":       map[string]any{"login": pr.Author},
		"labels":     labels,
		"created_at": pr.CreatedAt.Format(time.RFC3339),
		"updated_at": pr.UpdatedAt.Format(time.RFC3339),
		"head": map[string]any{
			"ref": pr.HeadRef, "sha": pr.HeadSHA, "label": headOwner(pr) + ":" + pr.HeadRef,
			"repo": headRepoJSON(pr),
		},
		"base": map[string]any{
			"ref": pr.BaseRef, "label": owner + ":" + pr.BaseRef,
			"repo": map[string]any{"full_name": pr.Repository},
		},
	}
	if pr.Merged {
		out["merged_at"] = pr.UpdatedAt.Format(time.RFC3339)
	}
	if pr.State == "closed" {
		out["closed_at"] = pr.UpdatedAt.Format(time.RFC3339)
	}
	return out
}

// getPull answers GET .../pulls/{n}.
func (s *Server) getPull(w http.ResponseWriter, r *http.Request, repository string, n int) {
	s.mu.Lock()
	pr := s.repo(repository).prs[n]
	var body any
	if pr != nil {
		body = pullJSON(*pr)
	}
	s.mu.Unlock()
	if pr == nil {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	s.writeCached(w, r, body)
}
