package githubapi

// What the pull-request lifecycle of sync uses beyond pull requests,
// statuses and its comment: comment listings with since (per pull request
// and for the whole repository), reactions on comments, collaborator
// permissions, deployments and deployment statuses, in GitHub's shapes, and
// issue_comment webhook deliveries.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Reaction is one reaction on an issue comment.
type Reaction struct {
	ID      int64
	Content string
	User    string
}

// Deployment is one deployment as created through the API.
type Deployment struct {
	ID                    int64
	Ref                   string
	SHA                   string
	Task                  string
	Environment           string
	Description           string
	TransientEnvironment  bool
	ProductionEnvironment bool
	// AutoMerge and RequiredContexts record what the request asked for
	// (GitHub defaults: true and every context); nil when not given.
	AutoMerge        *bool
	RequiredContexts *[]string
	Creator          string
	CreatedAt        time.Time
}

// DeploymentStatus is one status of a deployment.
type DeploymentStatus struct {
	ID             int64
	State          string
	Description    string
	Environment    string
	EnvironmentURL string
	LogURL         string
	CreatedAt      time.Time
}

// more is the server's state for these endpoints.
type more struct {
	reactions   map[string]map[int64][]Reaction // repository -> comment id
	permissions map[string]map[string]string    // repository -> user -> role
	deployments map[string][]*Deployment        // repository, oldest first
	depStatuses map[string]map[int64][]DeploymentStatus
}

func (s *Server) moreState() *more {
	m := &s.more
	if m.reactions == nil {
		m.reactions = map[string]map[int64][]Reaction{}
		m.permissions = map[string]map[string]string{}
		m.deployments = map[string][]*Deployment{}
		m.depStatuses = map[string]map[int64][]DeploymentStatus{}
	}
	return m
}

// apiUser is the login the server's token acts as.
const apiUser = "petri[bot]"

// SetPermission gives a user a role on a repository: admin, maintain,
// write, triage, read or none. A user without one reads as read, as on a
// public repository.
func (s *Server) SetPermission(repository, user, role string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.moreState()
	key := strings.ToLower(repository)
	if m.permissions[key] == nil {
		m.permissions[key] = map[string]string{}
	}
	m.permissions[key][strings.ToLower(user)] = role
}

// Reactions returns the reactions on a comment, oldest first.
func (s *Server) Reactions(repository string, commentID int64) []Reaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.moreState().reactions[strings.ToLower(repository)][commentID])
}

// Deployments returns the deployments of a repository, oldest first.
func (s *Server) Deployments(repository string) []Deployment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Deployment
	for _, d := range s.moreState().deployments[strings.ToLower(repository)] {
		out = append(out, *d)
	}
	return out
}

// DeploymentStatuses returns the statuses of a deployment, oldest first.
func (s *Server) DeploymentStatuses(repository string, id int64) []DeploymentStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.moreState().depStatuses[strings.ToLower(repository)][id])
}

// EditComment changes a comment's body as its author would.
func (s *Server) EditComment(repository string, id int64, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cs := range s.repo(repository).comments {
		for _, c := range cs {
			if c.ID == id {
				c.Body = body
				c.Edits++
				c.UpdatedAt = s.now().UTC().Truncate(time.Second)
			}
		}
	}
}

// since reads the since parameter; zero when absent.
func since(r *http.Request) (time.Time, bool) {
	v := r.URL.Query().Get("since")
	if v == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// listComments answers GET /repos/{o}/{r}/issues/{n}/comments: oldest
// first, only those updated at or after since.
func (s *Server) listComments(w http.ResponseWriter, r *http.Request, repository string, number int) {
	from, ok := since(r)
	if !ok {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	s.mu.Lock()
	out := []any{}
	for _, c := range s.repo(repository).comments[number] {
		if !c.UpdatedAt.Before(from) {
			out = append(out, commentJSON(repository, *c))
		}
	}
	s.mu.Unlock()
	s.paginate(w, r, out)
}

// routeMore serves the endpoints of this file; false when the request is
// none of them.
func (s *Server) routeMore(w http.ResponseWriter, r *http.Request, repository string, rest []string) bool {
	switch {
	case r.Method == http.MethodGet && len(rest) == 2 && rest[0] == "issues" && rest[1] == "comments":
		s.listRepositoryComments(w, r, repository)
	case r.Method == http.MethodPost && len(rest) == 4 && rest[0] == "issues" && rest[1] == "comments" && rest[3] == "reactions":
		id, _ := strconv.ParseInt(rest[2], 10, 64)
		s.react(w, r, repository, id)
	case r.Method == http.MethodGet && len(rest) == 3 && rest[0] == "collaborators" && rest[2] == "permission":
		s.permission(w, r, repository, rest[1])
	case r.Method == http.MethodPost && len(rest) == 1 && rest[0] == "deployments":
		s.createDeployment(w, r, repository)
	case r.Method == http.MethodGet && len(rest) == 1 && rest[0] == "deployments":
		s.listDeployments(w, r, repository)
	case len(rest) == 3 && rest[0] == "deployments" && rest[2] == "statuses":
		id, _ := strconv.ParseInt(rest[1], 10, 64)
		switch r.Method {
		case http.MethodPost:
			s.createDeploymentStatus(w, r, repository, id)
		case http.MethodGet:
			s.listDeploymentStatuses(w, r, repository, id)
		default:
			writeError(w, http.StatusNotFound, "Not Found")
		}
	default:
		return false
	}
	return true
}

// listRepositoryComments answers GET /repos/{o}/{r}/issues/comments: every
// comment of the repository updated at or after since, sorted by created
// (default) or updated, ascending (default) or descending.
func (s *Server) listRepositoryComments(w http.ResponseWriter, r *http.Request, repository string) {
	from, ok := since(r)
	q := r.URL.Query()
	sortBy, dir := q.Get("sort"), q.Get("direction")
	if !ok || (sortBy != "" && sortBy != "created" && sortBy != "updated") || (dir != "" && dir != "asc" && dir != "desc") {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	s.mu.Lock()
	var cs []Comment
	for _, list := range s.repo(repository).comments {
		for _, c := range list {
			if !c.UpdatedAt.Before(from) {
				cs = append(cs, *c)
			}
		}
	}
	s.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if dir == "desc" {
			a, b = b, a
		}
		if sortBy == "updated" && !a.UpdatedAt.Equal(b.UpdatedAt) {
			return a.UpdatedAt.Before(b.UpdatedAt)
		}
		return a.ID < b.ID
	})
	out := make([]any, 0, len(cs))
	for _, c := range cs {
		out = append(out, commentJSON(repository, c))
	}
	s.paginate(w, r, out)
}

var reactionContents = []string{"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}

// react answers POST .../issues/comments/{id}/reactions: 201 with a new
// reaction, 200 with the one the user already left.
func (s *Server) react(w http.ResponseWriter, r *http.Request, repository string, id int64) {
	var in struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !slices.Contains(reactionContents, in.Content) {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	s.mu.Lock()
	exists := false
	for _, cs := range s.repo(repository).comments {
		for _, c := range cs {
			exists = exists || c.ID == id
		}
	}
	if !exists {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	m := s.moreState()
	key := strings.ToLower(repository)
	if m.reactions[key] == nil {
		m.reactions[key] = map[int64][]Reaction{}
	}
	for _, re := range m.reactions[key][id] {
		if re.Content == in.Content && re.User == apiUser {
			s.mu.Unlock()
			s.charge(w)
			writeJSON(w, http.StatusOK, reactionJSON(re))
			return
		}
	}
	s.nextID++
	re := Reaction{ID: s.nextID, Content: in.Content, User: apiUser}
	m.reactions[key][id] = append(m.reactions[key][id], re)
	s.mu.Unlock()
	s.charge(w)
	writeJSON(w, http.StatusCreated, reactionJSON(re))
}

func reactionJSON(re Reaction) map[string]any {
	return map[string]any{"id": re.ID, "content": re.Content, "user": map[string]any{"login": re.User, "type": "Bot"}}
}

// permission answers GET .../collaborators/{user}/permission as GitHub
// does: permission is admin, write, read or none (maintain reads as write,
// triage as read), role_name the role itself.
func (s *Server) permission(w http.ResponseWriter, r *http.Request, repository, user string) {
	s.mu.Lock()
	role := s.moreState().permissions[strings.ToLower(repository)][strings.ToLower(user)]
	s.mu.Unlock()
	if role == "" {
		role = "read"
	}
	perm := map[string]string{"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read"}[role]
	if perm == "" {
		perm = "none"
	}
	s.writeCached(w, r, map[string]any{"permission": perm, "role_name": role, "user": map[string]any{"login": user, "type": "User"}})
}

func (s *Server) createDeployment(w http.ResponseWriter, r *http.Request, repository string) {
	var in struct {
		Ref                   string    `json:"ref"`
		Task                  string    `json:"task"`
		AutoMerge             *bool     `json:"auto_merge"`
		RequiredContexts      *[]string `json:"required_contexts"`
		Environment           string    `json:"environment"`
		Description           string    `json:"description"`
		TransientEnvironment  bool      `json:"transient_environment"`
		ProductionEnvironment *bool     `json:"production_environment"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Ref == "" {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	if in.Task == "" {
		in.Task = "deploy"
	}
	if in.Environment == "" {
		in.Environment = "production"
	}
	prod := in.Environment == "production"
	if in.ProductionEnvironment != nil {
		prod = *in.ProductionEnvironment
	}
	s.mu.Lock()
	s.nextID++
	d := &Deployment{ID: s.nextID, Ref: in.Ref, SHA: in.Ref, Task: in.Task, Environment: in.Environment, Description: in.Description,
		TransientEnvironment: in.TransientEnvironment, ProductionEnvironment: prod, AutoMerge: in.AutoMerge, RequiredContexts: in.RequiredContexts,
		Creator: apiUser, CreatedAt: s.now().UTC().Truncate(time.Second)}
	m := s.moreState()
	key := strings.ToLower(repository)
	m.deployments[key] = append(m.deployments[key], d)
	out := deploymentJSON(repository, *d)
	s.mu.Unlock()
	s.charge(w)
	writeJSON(w, http.StatusCreated, out)
}

// listDeployments answers GET .../deployments, newest first, filtered by
// sha, ref, task and environment.
func (s *Server) listDeployments(w http.ResponseWriter, r *http.Request, repository string) {
	q := r.URL.Query()
	s.mu.Lock()
	out := []any{}
	list := s.moreState().deployments[strings.ToLower(repository)]
	for i := len(list) - 1; i >= 0; i-- {
		d := list[i]
		if (q.Get("sha") != "" && q.Get("sha") != d.SHA) || (q.Get("ref") != "" && q.Get("ref") != d.Ref) ||
			(q.Get("task") != "" && q.Get("task") != d.Task) || (q.Get("environment") != "" && q.Get("environment") != d.Environment) {
			continue
		}
		out = append(out, deploymentJSON(repository, *d))
	}
	s.mu.Unlock()
	s.paginate(w, r, out)
}

var deploymentStates = []string{"error", "failure", "inactive", "in_progress", "queued", "pending", "success"}

func (s *Server) createDeploymentStatus(w http.ResponseWriter, r *http.Request, repository string, id int64) {
	var in struct {
		State          string `json:"state"`
		Description    string `json:"description"`
		Environment    string `json:"environment"`
		EnvironmentURL string `json:"environment_url"`
		LogURL         string `json:"log_url"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !slices.Contains(deploymentStates, in.State) || len(in.Description) > 140 {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	s.mu.Lock()
	m := s.moreState()
	key := strings.ToLower(repository)
	var dep *Deployment
	for _, d := range m.deployments[key] {
		if d.ID == id {
			dep = d
		}
	}
	if dep == nil {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	if in.Environment == "" {
		in.Environment = dep.Environment
	}
	s.nextID++
	st := DeploymentStatus{ID: s.nextID, State: in.State, Description: in.Description, Environment: in.Environment,
		EnvironmentURL: in.EnvironmentURL, LogURL: in.LogURL, CreatedAt: s.now().UTC().Truncate(time.Second)}
	if m.depStatuses[key] == nil {
		m.depStatuses[key] = map[int64][]DeploymentStatus{}
	}
	m.depStatuses[key][id] = append(m.depStatuses[key][id], st)
	s.mu.Unlock()
	s.charge(w)
	writeJSON(w, http.StatusCreated, deploymentStatusJSON(repository, id, st))
}

// listDeploymentStatuses answers GET .../deployments/{id}/statuses, newest
// first.
func (s *Server) listDeploymentStatuses(w http.ResponseWriter, r *http.Request, repository string, id int64) {
	s.mu.Lock()
	sts := slices.Clone(s.moreState().depStatuses[strings.ToLower(repository)][id])
	s.mu.Unlock()
	slices.Reverse(sts)
	out := []any{}
	for _, st := range sts {
		out = append(out, deploymentStatusJSON(repository, id, st))
	}
	s.paginate(w, r, out)
}

func deploymentJSON(repository string, d Deployment) map[string]any {
	api := "https://api.github.com/repos/" + repository
	return map[string]any{
		"id": d.ID, "node_id": fmt.Sprintf("DE_%d", d.ID), "sha": d.SHA, "ref": d.Ref, "task": d.Task, "payload": map[string]any{},
		"original_environment": d.Environment, "environment": d.Environment, "description": d.Description,
		"creator":    map[string]any{"login": d.Creator, "type": "Bot"},
		"created_at": d.CreatedAt.Format(time.RFC3339), "updated_at": d.CreatedAt.Format(time.RFC3339),
		"url":                    fmt.Sprintf("%s/deployments/%d", api, d.ID),
		"statuses_url":           fmt.Sprintf("%s/deployments/%d/statuses", api, d.ID),
		"repository_url":         api,
		"transient_environment":  d.TransientEnvironment,
		"production_environment": d.ProductionEnvironment,
	}
}

func deploymentStatusJSON(repository string, deployment int64, st DeploymentStatus) map[string]any {
	api := "https://api.github.com/repos/" + repository
	return map[string]any{
		"id": st.ID, "node_id": fmt.Sprintf("DES_%d", st.ID), "state": st.State, "description": st.Description,
		"environment": st.Environment, "environment_url": st.EnvironmentURL, "log_url": st.LogURL, "target_url": st.LogURL,
		"creator":        map[string]any{"login": apiUser, "type": "Bot"},
		"created_at":     st.CreatedAt.Format(time.RFC3339),
		"updated_at":     st.CreatedAt.Format(time.RFC3339),
		"url":            fmt.Sprintf("%s/deployments/%d/statuses/%d", api, deployment, st.ID),
		"deployment_url": fmt.Sprintf("%s/deployments/%d", api, deployment),
		"repository_url": api,
	}
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
	p, err := load("issue_comment", "created")
	if err != nil {
		return Delivery{}, err
	}
	patchRepository(p, repository)
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
