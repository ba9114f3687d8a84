// Labels with their history: GitLab's resource label events record who
// added and removed each label of a merge request.

package gitlabapi

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// LabelEvent is one resource label event of a merge request.
type LabelEvent struct {
	ID        int64
	Action    string // add or remove
	Label     string
	User      string
	CreatedAt time.Time
}

// AddLabel puts a label on a merge request as user: a label event, and
// the merge request's update hook.
func (s *Server) AddLabel(path string, iid int, label, user string) {
	s.UpdateMergeRequest(path, iid, func(mr *MergeRequest) {
		if !slices.Contains(mr.Labels, label) {
			mr.Labels = append(mr.Labels, label)
		}
	})
	s.labelEvent(path, iid, "add", label, user)
}

// RemoveLabel takes a label off a merge request as user.
func (s *Server) RemoveLabel(path string, iid int, label, user string) {
	s.UpdateMergeRequest(path, iid, func(mr *MergeRequest) {
		mr.Labels = slices.DeleteFunc(mr.Labels, func(l string) bool { return l == label })
	})
	s.labelEvent(path, iid, "remove", label, user)
}

func (s *Server) labelEvent(path string, iid int, action, label, user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.mustProject(path)
	s.addUser(user)
	if pr.labelEvents == nil {
		pr.labelEvents = map[int][]LabelEvent{}
	}
	pr.labelEvents[iid] = append(pr.labelEvents[iid], LabelEvent{ID: s.id(), Action: action, Label: label, User: user, CreatedAt: s.clock()})
}

// listLabelEvents answers GET .../merge_requests/:iid/resource_label_events,
// oldest first and paginated.
func (s *Server) listLabelEvents(w http.ResponseWriter, c *call, pr *project, iid int) any {
	events := pr.labelEvents[iid]
	lo, hi := paginate(w, c, len(events))
	out := []any{}
	for _, e := range events[lo:hi] {
		out = append(out, map[string]any{
			"id": e.ID, "action": e.Action, "created_at": stamp(e.CreatedAt),
			"resource_type": "MergeRequest", "resource_id": int64(iid) + pr.id*1000,
			"user": userJSON(s.users[strings.ToLower(e.User)]), "label": map[string]any{"id": e.ID, "name": e.Label},
		})
	}
	return out
}
