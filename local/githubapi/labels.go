package githubapi

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// Labels with their history: GitHub's issue events record who added
// (labeled) and removed (unlabeled) each label, the one place that says
// who put a label on a pull request.

// LabelEvent is one labeled or unlabeled event of a pull request.
type LabelEvent struct {
	ID        int64
	Event     string // labeled or unlabeled
	Label     string
	Actor     string
	CreatedAt time.Time
}

// AddLabel puts a label on a pull request as actor, recording a labeled
// event (a label set through UpdatePullRequest has no event, and so no
// one who added it).
func (s *Server) AddLabel(repository string, number int, label, actor string) PullRequest {
	pr := s.UpdatePullRequest(repository, number, func(pr *PullRequest) {
		if !slices.Contains(pr.Labels, label) {
			pr.Labels = append(pr.Labels, label)
		}
	})
	s.labelEvent(repository, number, "labeled", label, actor)
	return pr
}

// RemoveLabel takes a label off a pull request as actor, recording an
// unlabeled event.
func (s *Server) RemoveLabel(repository string, number int, label, actor string) PullRequest {
	pr := s.UpdatePullRequest(repository, number, func(pr *PullRequest) {
		pr.Labels = slices.DeleteFunc(pr.Labels, func(l string) bool { return l == label })
	})
	s.labelEvent(repository, number, "unlabeled", label, actor)
	return pr
}

func (s *Server) labelEvent(repository string, number int, event, label, actor string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.moreState()
	key := strings.ToLower(repository)
	if m.labelEvents[key] == nil {
		m.labelEvents[key] = map[int][]LabelEvent{}
	}
	m.nextEventID++
	m.labelEvents[key][number] = append(m.labelEvents[key][number], LabelEvent{
		ID: m.nextEventID, Event: event, Label: label, Actor: actor, CreatedAt: s.now().UTC().Truncate(time.Second),
	})
}

// listIssueEvents answers GET .../issues/{n}/events, oldest first and
// paginated, as GitHub does.
func (s *Server) listIssueEvents(w http.ResponseWriter, r *http.Request, repository string, number int) {
	s.mu.Lock()
	events := slices.Clone(s.moreState().labelEvents[strings.ToLower(repository)][number])
	s.mu.Unlock()
	out := make([]any, 0, len(events))
	for _, e := range events {
		out = append(out, map[string]any{
			"id": e.ID, "event": e.Event, "label": map[string]any{"name": e.Label},
			"actor": map[string]any{"login": e.Actor}, "created_at": e.CreatedAt.Format(time.RFC3339),
		})
	}
	s.paginate(w, r, out)
}
