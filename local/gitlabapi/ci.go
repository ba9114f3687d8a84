// Commit statuses, pipelines and jobs; users and members.

package gitlabapi

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// listStatuses answers GET /repository/commits/:sha/statuses with name and
// all: without all=true only the latest status of each name.
func (s *Server) listStatuses(w http.ResponseWriter, c *call, pr *project, sha string) any {
	var sts []*CommitStatus
	latest := map[string]int{}
	for _, st := range pr.statuses {
		if st.SHA != sha || (c.has("name") && st.Name != c.str("name")) {
			continue
		}
		if i, ok := latest[st.Name]; ok && c.str("all") != "true" {
			sts[i] = st
			continue
		}
		latest[st.Name] = len(sts)
		sts = append(sts, st)
	}
	lo, hi := paginate(w, c, len(sts))
	out := []any{}
	for _, st := range sts[lo:hi] {
		out = append(out, statusJSON(st))
	}
	return out
}

func statusJSON(st *CommitStatus) map[string]any {
	return map[string]any{"id": st.ID, "sha": st.SHA, "name": st.Name, "status": st.Status,
		"description": st.Description, "target_url": st.TargetURL}
}

// setStatus answers POST /statuses/:sha. A pending or running status of a
// name is one record that moves to the new state, and cannot move to the
// state it is in (GitLab's 400 "Cannot transition status"); a finished one
// is followed by a new record.
func (s *Server) setStatus(c *call, pr *project, sha string) (any, error) {
	state, name := c.str("state"), cmp.Or(c.str("name"), c.str("context"), "default")
	switch state {
	case "pending", "running", "success", "failed", "canceled", "skipped":
	default:
		return nil, errorf(http.StatusBadRequest, "400 state does not have a valid value")
	}
	var last *CommitStatus
	for _, st := range pr.statuses {
		if st.SHA == sha && st.Name == name {
			last = st
		}
	}
	if last != nil && (last.Status == "pending" || last.Status == "running") {
		if last.Status == state {
			return nil, errorf(http.StatusBadRequest, "Cannot transition status via :%s from :%s", verb(state), last.Status)
		}
		last.Status, last.Description, last.TargetURL = state, c.str("description"), c.str("target_url")
		return statusJSON(last), nil
	}
	st := &CommitStatus{ID: s.id(), SHA: sha, Name: name, Status: state, Description: c.str("description"), TargetURL: c.str("target_url")}
	pr.statuses = append(pr.statuses, st)
	return statusJSON(st), nil
}

// verb is the state machine event GitLab names in its refusal.
func verb(state string) string {
	switch state {
	case "pending":
		return "enqueue"
	case "running":
		return "run"
	}
	return state
}

// listPipelines answers GET /pipelines with sha and name, newest first
// unless sort=asc.
func (s *Server) listPipelines(w http.ResponseWriter, c *call, pr *project) any {
	var pls []*Pipeline
	for _, p := range pr.pipelines {
		if (c.has("sha") && p.SHA != c.str("sha")) || (c.has("name") && p.Name != c.str("name")) {
			continue
		}
		pls = append(pls, p)
	}
	slices.SortFunc(pls, func(a, b *Pipeline) int { return cmp.Compare(a.ID, b.ID) })
	if sortDesc(c) {
		slices.Reverse(pls)
	}
	lo, hi := paginate(w, c, len(pls))
	out := []any{}
	for _, p := range pls[lo:hi] {
		out = append(out, map[string]any{"id": p.ID, "project_id": pr.id, "sha": p.SHA, "ref": p.Ref,
			"name": p.Name, "status": p.Status})
	}
	return out
}

// listJobs answers GET /pipelines/:id/jobs.
func (s *Server) listJobs(w http.ResponseWriter, c *call, pr *project, id string) (any, error) {
	pid, _ := strconv.ParseInt(id, 10, 64)
	for _, p := range pr.pipelines {
		if p.ID != pid {
			continue
		}
		lo, hi := paginate(w, c, len(p.Jobs))
		out := []any{}
		for _, j := range p.Jobs[lo:hi] {
			out = append(out, map[string]any{"id": j.ID, "name": j.Name, "status": j.Status,
				"pipeline": map[string]any{"id": p.ID, "sha": p.SHA, "ref": p.Ref, "status": p.Status}})
		}
		return out, nil
	}
	return nil, errorf(http.StatusNotFound, "404 Pipeline Not Found")
}

func userJSON(u *user) map[string]any {
	if u == nil {
		return nil
	}
	return map[string]any{"id": u.id, "username": u.username, "name": u.username, "state": "active"}
}

// listUsers answers GET /users?username=, which finds one user by name in
// any case.
func (s *Server) listUsers(c *call) any {
	out := []any{}
	if u := s.users[strings.ToLower(c.str("username"))]; u != nil {
		out = append(out, userJSON(u))
	}
	return out
}

// member answers GET /members/all/:user_id: the project's own membership,
// else the inherited one.
func (s *Server) member(pr *project, id string) (any, error) {
	uid, _ := strconv.ParseInt(id, 10, 64)
	m, ok := pr.members[uid]
	if !ok {
		m, ok = pr.inherited[uid]
	}
	if !ok {
		return nil, errorf(http.StatusNotFound, "404 Member Not Found")
	}
	var u *user
	for _, candidate := range s.users {
		if candidate.id == uid {
			u = candidate
		}
	}
	out := userJSON(u)
	out["access_level"] = m.level
	out["state"] = m.state
	return out, nil
}
