package githubapi

import (
	"net/http"
	"slices"
)

// CheckRun is one check run on a commit.
type CheckRun struct {
	Name       string
	Status     string // queued, in_progress, completed
	Conclusion string // success, failure, ... when completed
	// App is the slug of the GitHub App that posted the run (app.slug);
	// github-actions when empty, as for a workflow's job.
	App string
}

// SetCheckRun creates or replaces the check run of that name and app on a
// commit: runs of one name by different apps are different runs, as on
// GitHub.
func (s *Server) SetCheckRun(repository, sha string, run CheckRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(repository)
	runs := r.checkRuns[sha]
	for i := range runs {
		if runs[i].Name == run.Name && checkApp(runs[i]) == checkApp(run) {
			runs[i] = run
			return
		}
	}
	r.checkRuns[sha] = append(runs, run)
}

// listCheckRuns answers GET .../commits/{sha}/check-runs, filtered by
// check_name.
func (s *Server) listCheckRuns(w http.ResponseWriter, r *http.Request, repository, sha string) {
	s.mu.Lock()
	runs := slices.Clone(s.repo(repository).checkRuns[sha])
	s.mu.Unlock()
	out := []any{}
	for _, c := range runs {
		if name := r.URL.Query().Get("check_name"); name != "" && name != c.Name {
			continue
		}
		run := map[string]any{"name": c.Name, "status": c.Status, "head_sha": sha, "app": map[string]any{"slug": checkApp(c)}}
		if c.Conclusion != "" {
			run["conclusion"] = c.Conclusion
		}
		out = append(out, run)
	}
	s.writeCached(w, r, map[string]any{"total_count": len(out), "check_runs": out})
}

// checkApp is the slug of the app that posted a run.
func checkApp(c CheckRun) string {
	if c.App == "" {
		return "github-actions"
	}
	return c.App
}
