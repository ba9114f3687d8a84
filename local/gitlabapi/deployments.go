// Environments and deployments.

package gitlabapi

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

func (s *Server) routeEnvironments(c *call, pr *project, p []string) (any, error) {
	if len(p) == 0 {
		return nil, errorf(http.StatusNotFound, "404 Not Found")
	}
	id, _ := strconv.ParseInt(p[0], 10, 64)
	var env *Environment
	for _, e := range pr.envs {
		if e.ID == id {
			env = e
		}
	}
	if env == nil {
		return nil, errorf(http.StatusNotFound, "404 Environment Not Found")
	}
	switch m := c.r.Method; {
	case len(p) == 1 && m == http.MethodGet:
		return envJSON(env), nil
	case len(p) == 1 && m == http.MethodPut:
		if c.has("external_url") {
			env.ExternalURL = c.str("external_url")
		}
		return envJSON(env), nil
	case len(p) == 2 && p[1] == "stop" && m == http.MethodPost:
		env.State = "stopped"
		return envJSON(env), nil
	}
	return nil, errorf(http.StatusNotFound, "404 Not Found")
}

func envJSON(e *Environment) map[string]any {
	return map[string]any{"id": e.ID, "name": e.Name, "state": e.State, "external_url": e.ExternalURL}
}

func (s *Server) routeDeployments(w http.ResponseWriter, c *call, pr *project, p []string) (any, error) {
	m := c.r.Method
	switch {
	case len(p) == 0 && m == http.MethodGet:
		return s.listDeployments(w, c, pr), nil
	case len(p) == 0 && m == http.MethodPost:
		return s.createDeployment(c, pr)
	}
	id, _ := strconv.ParseInt(p[0], 10, 64)
	var d *Deployment
	for _, candidate := range pr.deploys {
		if candidate.ID == id {
			d = candidate
		}
	}
	if d == nil || len(p) != 1 {
		return nil, errorf(http.StatusNotFound, "404 Deployment Not Found")
	}
	switch m {
	case http.MethodGet:
		return s.deploymentJSON(pr, d), nil
	case http.MethodPut:
		if err := transition(d, c.str("status")); err != nil {
			return nil, err
		}
		return s.deploymentJSON(pr, d), nil
	}
	return nil, errorf(http.StatusMethodNotAllowed, "405 Method Not Allowed")
}

// transition moves a deployment to a status as GitLab's state machine
// does: running only from created or blocked; success, failed and canceled
// from any status but their own.
func transition(d *Deployment, status string) error {
	switch status {
	case "running":
		if d.Status != "created" && d.Status != "blocked" {
			return errorf(http.StatusBadRequest, "400 Cannot transition status via :run from :%s", d.Status)
		}
	case "success", "failed", "canceled":
		if d.Status == status {
			return errorf(http.StatusBadRequest, "400 Cannot transition status from :%s to :%s", d.Status, status)
		}
	default:
		return errorf(http.StatusBadRequest, "400 status does not have a valid value")
	}
	d.Status = status
	return nil
}

// listDeployments answers GET /deployments with environment, ordered by
// id, descending unless sort=asc.
func (s *Server) listDeployments(w http.ResponseWriter, c *call, pr *project) any {
	var ds []*Deployment
	for _, d := range pr.deploys {
		if !c.has("environment") || d.Environment == c.str("environment") {
			ds = append(ds, d)
		}
	}
	slices.SortFunc(ds, func(a, b *Deployment) int { return cmp.Compare(a.ID, b.ID) })
	if sortDesc(c) {
		slices.Reverse(ds)
	}
	lo, hi := paginate(w, c, len(ds))
	out := []any{}
	for _, d := range ds[lo:hi] {
		out = append(out, s.deploymentJSON(pr, d))
	}
	return out
}

// createDeployment answers POST /deployments: environment, ref, sha, tag
// and status are required; the environment is created with its first
// deployment and is available again with each. The token's user is the
// deployment's user, its creator.
func (s *Server) createDeployment(c *call, pr *project) (any, error) {
	for _, name := range []string{"environment", "ref", "sha", "tag", "status"} {
		if !c.has(name) || c.str(name) == "" {
			return nil, errorf(http.StatusBadRequest, "400 %s is missing", name)
		}
	}
	status := c.str("status")
	switch status {
	case "running", "success", "failed", "canceled":
	default:
		return nil, errorf(http.StatusBadRequest, "400 status does not have a valid value")
	}
	var env *Environment
	for _, e := range pr.envs {
		if e.Name == c.str("environment") {
			env = e
		}
	}
	if env == nil {
		env = &Environment{ID: s.id(), Name: c.str("environment")}
		pr.envs = append(pr.envs, env)
	}
	env.State = "available"
	d := &Deployment{ID: s.id(), Environment: env.Name, Ref: c.str("ref"), SHA: c.str("sha"), Status: status}
	if c.self != nil {
		d.User = c.self.username
	}
	pr.deploys = append(pr.deploys, d)
	return s.deploymentJSON(pr, d), nil
}

func (s *Server) deploymentJSON(pr *project, d *Deployment) map[string]any {
	out := map[string]any{"id": d.ID, "ref": d.Ref, "sha": d.SHA, "status": d.Status,
		"user": userJSON(s.users[strings.ToLower(d.User)])}
	for _, e := range pr.envs {
		if e.Name == d.Environment {
			out["environment"] = map[string]any{"id": e.ID, "name": e.Name, "external_url": e.ExternalURL}
		}
	}
	return out
}
