package githubapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

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
	// Creator is who posted it: the token's user through the API, or
	// whoever AddDeploymentStatus names.
	Creator   string
	CreatedAt time.Time
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
		EnvironmentURL: in.EnvironmentURL, LogURL: in.LogURL, Creator: apiUser, CreatedAt: s.now().UTC().Truncate(time.Second)}
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
		"creator":    map[string]any{"login": d.Creator, "type": userType(d.Creator)},
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
		"creator":        map[string]any{"login": st.Creator, "type": userType(st.Creator)},
		"created_at":     st.CreatedAt.Format(time.RFC3339),
		"updated_at":     st.CreatedAt.Format(time.RFC3339),
		"url":            fmt.Sprintf("%s/deployments/%d/statuses/%d", api, deployment, st.ID),
		"deployment_url": fmt.Sprintf("%s/deployments/%d", api, deployment),
		"repository_url": api,
	}
}

// AddDeployment records a deployment someone other than the token's user
// made, such as production's by a release pipeline: the repository's
// deployments are shared by everyone who deploys it, and a client must
// leave the others' alone. Creator, Task and Environment default to
// "release-bot", "deploy" and "production".
func (s *Server) AddDeployment(repository string, d Deployment) Deployment {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	d.ID = s.nextID
	if d.Creator == "" {
		d.Creator = "release-bot"
	}
	if d.Task == "" {
		d.Task = "deploy"
	}
	if d.Environment == "" {
		d.Environment = "production"
		d.ProductionEnvironment = true
	}
	if d.SHA == "" {
		d.SHA = d.Ref
	}
	d.CreatedAt = s.now().UTC().Truncate(time.Second)
	m := s.moreState()
	key := strings.ToLower(repository)
	m.deployments[key] = append(m.deployments[key], &d)
	return d
}

// AddDeploymentStatus records a status of a deployment posted by creator;
// false when there is no such deployment.
func (s *Server) AddDeploymentStatus(repository string, id int64, st DeploymentStatus, creator string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.moreState()
	key := strings.ToLower(repository)
	found := false
	for _, d := range m.deployments[key] {
		if d.ID == id {
			found = true
			if st.Environment == "" {
				st.Environment = d.Environment
			}
		}
	}
	if !found {
		return false
	}
	s.nextID++
	st.ID, st.Creator, st.CreatedAt = s.nextID, creator, s.now().UTC().Truncate(time.Second)
	if m.depStatuses[key] == nil {
		m.depStatuses[key] = map[int64][]DeploymentStatus{}
	}
	m.depStatuses[key][id] = append(m.depStatuses[key][id], st)
	return true
}
