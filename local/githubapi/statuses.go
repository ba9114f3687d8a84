package githubapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// Status is one commit status as posted through the API.
type Status struct {
	ID          int64
	Context     string
	State       string
	Description string
	TargetURL   string
	CreatedAt   time.Time
}

// SetStatus posts a commit status as another integration (CI) would.
func (s *Server) SetStatus(repository, sha, context, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	r := s.repo(repository)
	r.statuses[sha] = append(r.statuses[sha], Status{ID: s.nextID, Context: context, State: state, CreatedAt: s.now()})
}

// Statuses returns every status posted on a commit, oldest first.
func (s *Server) Statuses(repository, sha string) []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.repo(repository).statuses[sha])
}

func (s *Server) combinedStatus(w http.ResponseWriter, r *http.Request, repository, sha string) {
	s.mu.Lock()
	sts := slices.Clone(s.repo(repository).statuses[sha])
	s.mu.Unlock()
	latest := map[string]Status{}
	var order []string
	for _, st := range sts {
		if _, ok := latest[st.Context]; !ok {
			order = append(order, st.Context)
		}
		latest[st.Context] = st
	}
	state := "success"
	out := []any{}
	for _, c := range order {
		st := latest[c]
		out = append(out, statusJSON(st))
		switch {
		case st.State == "failure" || st.State == "error":
			state = "failure"
		case st.State == "pending" && state != "failure":
			state = "pending"
		}
	}
	if len(out) == 0 {
		state = "pending"
	}
	s.writeCached(w, r, map[string]any{"state": state, "sha": sha, "total_count": len(out), "statuses": out})
}

func statusJSON(st Status) map[string]any {
	return map[string]any{"id": st.ID, "context": st.Context, "state": st.State, "description": st.Description, "target_url": st.TargetURL, "created_at": st.CreatedAt.UTC().Format(time.RFC3339)}
}

// listStatuses answers GET .../commits/{sha}/statuses.
func (s *Server) listStatuses(w http.ResponseWriter, r *http.Request, repository, sha string) {
	s.mu.Lock()
	sts := slices.Clone(s.repo(repository).statuses[sha])
	s.mu.Unlock()
	slices.Reverse(sts) // newest first, as GitHub lists them
	out := []any{}
	for _, st := range sts {
		out = append(out, statusJSON(st))
	}
	s.writeCached(w, r, out)
}

// createStatus answers POST .../statuses/{sha}.
func (s *Server) createStatus(w http.ResponseWriter, r *http.Request, repository, sha string) {
	var in struct {
		State       string `json:"state"`
		Context     string `json:"context"`
		Description string `json:"description"`
		TargetURL   string `json:"target_url"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.State == "" {
		writeError(w, http.StatusUnprocessableEntity, "Validation Failed")
		return
	}
	if in.Context == "" {
		in.Context = "default"
	}
	s.mu.Lock()
	s.nextID++
	st := Status{ID: s.nextID, Context: in.Context, State: in.State, Description: in.Description, TargetURL: in.TargetURL, CreatedAt: s.now()}
	rp := s.repo(repository)
	rp.statuses[sha] = append(rp.statuses[sha], st)
	s.mu.Unlock()
	s.charge(w)
	writeJSON(w, http.StatusCreated, statusJSON(st))
}
