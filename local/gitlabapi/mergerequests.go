// Merge requests, their notes and the notes' award emoji.

package gitlabapi

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

func (s *Server) routeMergeRequests(w http.ResponseWriter, c *call, pr *project, p []string) (any, error) {
	m := c.r.Method
	if len(p) == 0 {
		if m == http.MethodGet {
			return s.listMergeRequests(w, c, pr)
		}
		return nil, errorf(http.StatusMethodNotAllowed, "405 Method Not Allowed")
	}
	iid, err := strconv.Atoi(p[0])
	mr := pr.mrs[iid]
	if err != nil || mr == nil {
		return nil, errorf(http.StatusNotFound, "404 Not found")
	}
	switch {
	case len(p) == 1 && m == http.MethodGet:
		return s.mergeRequestJSON(pr, mr), nil
	case len(p) == 2 && p[1] == "resource_label_events" && m == http.MethodGet:
		return s.listLabelEvents(w, c, pr, iid), nil
	case len(p) == 2 && p[1] == "notes" && m == http.MethodGet:
		return s.listNotes(w, c, pr, iid), nil
	case len(p) == 2 && p[1] == "notes" && m == http.MethodPost:
		n, err := s.addNote(pr, iid, c.self.username, c.str("body"), false)
		if err != nil {
			return nil, err
		}
		return s.noteJSON(n), nil
	case len(p) == 3 && p[1] == "notes" && m == http.MethodPut:
		return s.editNote(c, pr, iid, p[2])
	case len(p) == 4 && p[1] == "notes" && p[3] == "award_emoji" && m == http.MethodPost:
		return s.award(c, pr, iid, p[2])
	case len(p) == 4 && p[1] == "notes" && p[3] == "award_emoji" && m == http.MethodGet:
		return s.listAwards(w, c, pr, iid, p[2])
	}
	return nil, errorf(http.StatusNotFound, "404 Not Found")
}

// listMergeRequests answers GET /projects/:id/merge_requests with state
// (opened, closed, merged, all), updated_after, order_by (created_at,
// updated_at) and sort.
func (s *Server) listMergeRequests(w http.ResponseWriter, c *call, pr *project) (any, error) {
	st := cmp.Or(c.str("state"), "all")
	var after time.Time
	if c.has("updated_after") {
		t, err := time.Parse(time.RFC3339, c.str("updated_after"))
		if err != nil {
			return nil, errorf(http.StatusBadRequest, "400 updated_after is invalid")
		}
		after = t
	}
	var mrs []*MergeRequest
	for _, mr := range pr.mrs {
		if (st == "all" || mr.State == st) && !mr.UpdatedAt.Before(after) {
			mrs = append(mrs, mr)
		}
	}
	by := func(mr *MergeRequest) time.Time { return mr.CreatedAt }
	if c.str("order_by") == "updated_at" {
		by = func(mr *MergeRequest) time.Time { return mr.UpdatedAt }
	}
	slices.SortFunc(mrs, func(a, b *MergeRequest) int {
		return cmp.Or(by(a).Compare(by(b)), cmp.Compare(a.IID, b.IID))
	})
	if sortDesc(c) {
		slices.Reverse(mrs)
	}
	lo, hi := paginate(w, c, len(mrs))
	out := []any{}
	for _, mr := range mrs[lo:hi] {
		out = append(out, s.mergeRequestJSON(pr, mr))
	}
	return out, nil
}

func (s *Server) mergeRequestJSON(pr *project, mr *MergeRequest) map[string]any {
	source := pr.id
	if mr.SourceProject != "" {
		if fork := s.projects[strings.ToLower(mr.SourceProject)]; fork != nil {
			source = fork.id
		}
	}
	var merged any
	if mr.State == "merged" {
		merged = stamp(mr.UpdatedAt)
	}
	return map[string]any{
		"id": int64(mr.IID) + pr.id*1000, "iid": mr.IID, "project_id": pr.id,
		"title": mr.Title, "state": mr.State, "draft": mr.Draft, "work_in_progress": mr.Draft,
		"source_branch": mr.SourceBranch, "target_branch": mr.TargetBranch,
		"source_project_id": source, "target_project_id": pr.id, "sha": mr.SHA,
		"labels": append([]string{}, mr.Labels...), "author": userJSON(s.users[strings.ToLower(mr.Author)]),
		"web_url":    s.URL + "/" + pr.path + "/-/merge_requests/" + strconv.Itoa(mr.IID),
		"created_at": stamp(mr.CreatedAt), "updated_at": stamp(mr.UpdatedAt), "merged_at": merged,
	}
}

// listNotes answers GET .../merge_requests/:iid/notes, ordered by
// created_at or updated_at, descending unless sort=asc, as GitLab does.
func (s *Server) listNotes(w http.ResponseWriter, c *call, pr *project, iid int) any {
	var notes []*Note
	for _, n := range pr.notes {
		if n.IID == iid {
			notes = append(notes, n)
		}
	}
	by := func(n *Note) time.Time { return n.CreatedAt }
	if c.str("order_by") == "updated_at" {
		by = func(n *Note) time.Time { return n.UpdatedAt }
	}
	slices.SortFunc(notes, func(a, b *Note) int { return cmp.Or(by(a).Compare(by(b)), cmp.Compare(a.ID, b.ID)) })
	if sortDesc(c) {
		slices.Reverse(notes)
	}
	lo, hi := paginate(w, c, len(notes))
	out := []any{}
	for _, n := range notes[lo:hi] {
		out = append(out, s.noteJSON(n))
	}
	return out
}

func (s *Server) noteJSON(n *Note) map[string]any {
	author := map[string]any{}
	if u := s.users[strings.ToLower(n.Author)]; u != nil {
		author = userJSON(u)
	}
	return map[string]any{
		"id": n.ID, "body": n.Body, "author": author, "system": n.System,
		"noteable_type": "MergeRequest", "noteable_iid": n.IID,
		"created_at": stamp(n.CreatedAt), "updated_at": stamp(n.UpdatedAt),
	}
}

// editNote answers PUT .../notes/:id: only the note's author may edit it.
func (s *Server) editNote(c *call, pr *project, iid int, id string) (any, error) {
	n, err := s.note(pr, iid, id)
	if err != nil {
		return nil, err
	}
	if !strings.EqualFold(n.Author, c.self.username) {
		return nil, errorf(http.StatusForbidden, "403 Forbidden")
	}
	n.Body = c.str("body")
	n.UpdatedAt = s.clock()
	pr.mrs[iid].UpdatedAt = n.UpdatedAt
	s.emitNote(pr, n, "update")
	return s.noteJSON(n), nil
}

func (s *Server) note(pr *project, iid int, id string) (*Note, error) {
	nid, err := strconv.ParseInt(id, 10, 64)
	n := pr.notes[nid]
	if err != nil || n == nil || n.IID != iid {
		return nil, errorf(http.StatusNotFound, "404 Note Not Found")
	}
	return n, nil
}

// award answers POST .../notes/:id/award_emoji: the same emoji twice by
// one user is GitLab's 404 "has already been taken".
func (s *Server) award(c *call, pr *project, iid int, id string) (any, error) {
	n, err := s.note(pr, iid, id)
	if err != nil {
		return nil, err
	}
	name := c.str("name")
	if name == "" {
		return nil, errorf(http.StatusBadRequest, "400 name is missing")
	}
	for _, a := range pr.awards {
		if a.NoteID == n.ID && a.Name == name && strings.EqualFold(a.User, c.self.username) {
			return nil, errorf(http.StatusNotFound, "404 Award Emoji Name has already been taken Not Found")
		}
	}
	pr.awards = append(pr.awards, Award{NoteID: n.ID, Name: name, User: c.self.username})
	return map[string]any{"id": s.id(), "name": name, "user": userJSON(c.self), "awardable_id": n.ID, "awardable_type": "Note"}, nil
}

// listAwards answers GET .../notes/:id/award_emoji.
func (s *Server) listAwards(w http.ResponseWriter, c *call, pr *project, iid int, id string) (any, error) {
	n, err := s.note(pr, iid, id)
	if err != nil {
		return nil, err
	}
	var awards []Award
	for _, a := range pr.awards {
		if a.NoteID == n.ID {
			awards = append(awards, a)
		}
	}
	lo, hi := paginate(w, c, len(awards))
	out := []any{}
	for _, a := range awards[lo:hi] {
		out = append(out, map[string]any{"name": a.Name, "user": userJSON(s.users[strings.ToLower(a.User)]),
			"awardable_id": n.ID, "awardable_type": "Note"})
	}
	return out, nil
}
