// Webhooks: what the server delivers to a project's hooks when its merge
// requests, notes and pipelines change, built the way GitLab builds them
// (GitLab's published example payloads, sync/provider/gitlab/testdata),
// with the hook's secret token in X-Gitlab-Token.

package gitlabapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Hook is a project or group hook: every project whose full path starts
// with Under (a group's path, or the project's own) delivers to it.
type Hook struct {
	// URL is where deliveries are POSTed.
	URL string
	// Token is the secret token sent in X-Gitlab-Token; none when empty.
	Token string
	// Under is a path prefix: a project's own path (a project hook) or a
	// group's (a group hook: its subgroups' projects too). Every project
	// when empty.
	Under string
}

// Delivery is one hook delivery and how it was answered.
type Delivery struct {
	// UUID is X-Gitlab-Event-UUID, the same on a redelivery.
	UUID  string
	Event string
	// Action is the object's action (open, update, create, ...) or a
	// pipeline's status.
	Action string
	// Status is the receiver's answer; 0 when it could not be reached or
	// the delivery was muted.
	Status int
	Err    string
	// Muted says the delivery was made while hooks were muted (a webhook
	// lost on the way): it was not sent.
	Muted bool

	url, token string
	body       []byte
}

// hookState is the server's hooks and the deliveries made.
type hookState struct {
	hooks      []Hook
	muted      bool
	outbox     chan *Delivery
	deliveries []*Delivery
	client     *http.Client
}

// AddHook adds a hook; deliveries to it start with the next change.
func (s *Server) AddHook(h Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook.hooks = append(s.hook.hooks, h)
	if s.hook.outbox == nil {
		s.hook.outbox = make(chan *Delivery, 4096)
		s.hook.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
		go s.deliverLoop(s.hook.outbox)
	}
}

// MuteHooks makes the next deliveries get lost (true) or sent again
// (false): a test's webhooks that never reach the receiver.
func (s *Server) MuteHooks(muted bool) {
	s.mu.Lock()
	s.hook.muted = muted
	s.mu.Unlock()
}

// Deliveries returns the deliveries made so far, oldest first.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, 0, len(s.hook.deliveries))
	for _, d := range s.hook.deliveries {
		out = append(out, *d)
	}
	return out
}

// Redeliver sends a delivery again, with the same UUID and body, as
// GitLab's "Resend request" does (or a replaying attacker would).
func (s *Server) Redeliver(uuid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.hook.deliveries {
		if d.UUID == uuid {
			again := &Delivery{UUID: d.UUID, Event: d.Event, Action: d.Action, url: d.url, token: d.token, body: d.body}
			s.hook.deliveries = append(s.hook.deliveries, again)
			s.hook.outbox <- again
			return nil
		}
	}
	return fmt.Errorf("gitlabapi: no delivery %s", uuid)
}

// deliverLoop sends deliveries one by one, in the order they were made.
func (s *Server) deliverLoop(outbox <-chan *Delivery) {
	for d := range outbox {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, d.url, bytes.NewReader(d.body))
		if err != nil {
			s.settle(d, 0, err)
			continue
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "GitLab/17.8.0")
		req.Header.Set("X-Gitlab-Event", d.Event)
		req.Header.Set("X-Gitlab-Event-UUID", d.UUID)
		req.Header.Set("X-Gitlab-Instance", s.URL)
		if d.token != "" {
			req.Header.Set("X-Gitlab-Token", d.token)
		}
		resp, err := s.hook.client.Do(req)
		if err != nil {
			s.settle(d, 0, err)
			continue
		}
		_ = resp.Body.Close()
		s.settle(d, resp.StatusCode, nil)
	}
}

func (s *Server) settle(d *Delivery, status int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d.Status = status
	if err != nil {
		d.Err = err.Error()
	}
}

// emit delivers a payload to every hook of the project. The caller holds
// s.mu.
func (s *Server) emit(pr *project, event, action string, payload map[string]any) {
	body, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	for _, h := range s.hook.hooks {
		if h.Under != "" && !strings.EqualFold(pr.path, h.Under) && !strings.HasPrefix(strings.ToLower(pr.path), strings.ToLower(h.Under)+"/") {
			continue
		}
		d := &Delivery{UUID: newUUID(), Event: event, Action: action, Muted: s.hook.muted, url: h.URL, token: h.Token, body: body}
		s.hook.deliveries = append(s.hook.deliveries, d)
		if d.Muted {
			continue
		}
		select {
		case s.hook.outbox <- d:
		default:
			d.Err = "outbox full"
		}
	}
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// hookStamp is a time as GitLab's merge request hooks write it; noteStamp
// as its note hooks do (both are in GitLab's examples).
func hookStamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
func noteStamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func (s *Server) hookUser(name string) map[string]any {
	u := s.users[strings.ToLower(name)]
	if u == nil {
		return nil
	}
	return map[string]any{"id": u.id, "name": u.username, "username": u.username,
		"avatar_url": "https://www.gravatar.com/avatar/" + u.username, "email": "[REDACTED]"}
}

func (s *Server) hookProject(pr *project) map[string]any {
	web := s.URL + "/" + pr.path
	ns := pr.path[:max(0, strings.LastIndex(pr.path, "/"))]
	return map[string]any{"id": pr.id, "name": pr.path[strings.LastIndex(pr.path, "/")+1:], "description": "",
		"web_url": web, "avatar_url": nil, "git_ssh_url": "git@localhost:" + pr.path + ".git",
		"git_http_url": web + ".git", "namespace": ns, "visibility_level": 20, "path_with_namespace": pr.path,
		"default_branch": "main", "ci_config_path": "", "homepage": web, "url": web + ".git",
		"ssh_url": "git@localhost:" + pr.path + ".git", "http_url": web + ".git"}
}

func hookLabels(pr *project, labels []string) []any {
	out := []any{}
	for _, l := range labels {
		h := fnv.New32a()
		_, _ = h.Write([]byte(l))
		out = append(out, map[string]any{"id": int64(h.Sum32() % 100000), "title": l, "color": "#428BCA",
			"project_id": pr.id, "created_at": "2024-01-01 00:00:00 UTC", "updated_at": "2024-01-01 00:00:00 UTC",
			"template": false, "description": nil, "type": "ProjectLabel", "group_id": nil})
	}
	return out
}

// hookMergeRequest is a merge request as hooks carry it (object_attributes
// of a merge request hook, merge_request of a note or pipeline hook).
func (s *Server) hookMergeRequest(pr *project, mr *MergeRequest) map[string]any {
	source := pr
	if mr.SourceProject != "" {
		if fork := s.projects[strings.ToLower(mr.SourceProject)]; fork != nil {
			source = fork
		}
	}
	var authorID int64
	if u := s.users[strings.ToLower(mr.Author)]; u != nil {
		authorID = u.id
	}
	url := s.URL + "/" + pr.path + "/-/merge_requests/" + fmt.Sprint(mr.IID)
	return map[string]any{
		"id": int64(mr.IID) + pr.id*1000, "iid": mr.IID, "target_branch": mr.TargetBranch,
		"source_branch": mr.SourceBranch, "source_project_id": source.id, "target_project_id": pr.id,
		"author_id": authorID, "assignee_ids": []int64{}, "reviewer_ids": []int64{}, "title": mr.Title,
		"created_at": hookStamp(mr.CreatedAt), "updated_at": hookStamp(mr.UpdatedAt), "milestone_id": nil,
		"state": mr.State, "draft": mr.Draft, "work_in_progress": mr.Draft, "merge_status": "can_be_merged",
		"detailed_merge_status": "mergeable", "description": "", "url": url,
		"source": s.hookProject(source), "target": s.hookProject(pr),
		"last_commit": map[string]any{"id": mr.SHA, "message": mr.Title + "\n", "title": mr.Title,
			"timestamp": hookStamp(mr.UpdatedAt), "url": s.URL + "/" + source.path + "/-/commit/" + mr.SHA,
			"author": map[string]any{"name": mr.Author, "email": "[REDACTED]"}},
		"labels": hookLabels(pr, mr.Labels),
	}
}

// emitMergeRequest delivers a merge request hook; oldrev is the previous
// head when the action brought new commits.
func (s *Server) emitMergeRequest(pr *project, mr *MergeRequest, action, oldrev string, changes map[string]any) {
	attrs := s.hookMergeRequest(pr, mr)
	attrs["action"] = action
	if oldrev != "" {
		attrs["oldrev"] = oldrev
	}
	if changes == nil {
		changes = map[string]any{}
	}
	s.emit(pr, "Merge Request Hook", action, map[string]any{
		"object_kind": "merge_request", "event_type": "merge_request", "user": s.hookUser(mr.Author),
		"project": s.hookProject(pr), "object_attributes": attrs, "labels": hookLabels(pr, mr.Labels),
		"changes": changes, "repository": map[string]any{"name": pr.path[strings.LastIndex(pr.path, "/")+1:],
			"url": s.URL + "/" + pr.path + ".git", "description": "", "homepage": s.URL + "/" + pr.path},
	})
}

// mergeRequestAction is the action of a merge request hook for a change
// from before to after, and the previous head when commits came.
func mergeRequestAction(before, after MergeRequest) (action, oldrev string, changes map[string]any) {
	changes = map[string]any{}
	switch {
	case before.State == "opened" && after.State == "merged":
		return "merge", "", map[string]any{"state_id": map[string]any{"previous": 1, "current": 3}}
	case before.State == "opened" && after.State == "closed":
		return "close", "", map[string]any{"state_id": map[string]any{"previous": 1, "current": 2}}
	case before.State != "opened" && after.State == "opened":
		return "reopen", "", map[string]any{"state_id": map[string]any{"previous": 2, "current": 1}}
	}
	if before.Title != after.Title {
		changes["title"] = map[string]any{"previous": before.Title, "current": after.Title}
	}
	if !slices.Equal(before.Labels, after.Labels) {
		changes["labels"] = map[string]any{"previous": before.Labels, "current": after.Labels}
	}
	if before.Draft != after.Draft {
		changes["draft"] = map[string]any{"previous": before.Draft, "current": after.Draft}
	}
	if before.SHA != after.SHA {
		return "update", before.SHA, changes
	}
	return "update", "", changes
}

// emitNote delivers a note hook of a merge request's note.
func (s *Server) emitNote(pr *project, n *Note, action string) {
	mr := pr.mrs[n.IID]
	if mr == nil || n.System {
		return
	}
	var authorID int64
	if u := s.users[strings.ToLower(n.Author)]; u != nil {
		authorID = u.id
	}
	url := s.URL + "/" + pr.path + "/-/merge_requests/" + fmt.Sprint(mr.IID) + "#note_" + fmt.Sprint(n.ID)
	s.emit(pr, "Note Hook", action, map[string]any{
		"object_kind": "note", "event_type": "note", "user": s.hookUser(n.Author), "project_id": pr.id,
		"project": s.hookProject(pr),
		"object_attributes": map[string]any{"id": n.ID, "note": n.Body, "noteable_type": "MergeRequest",
			"author_id": authorID, "created_at": noteStamp(n.CreatedAt), "updated_at": noteStamp(n.UpdatedAt),
			"project_id": pr.id, "attachment": nil, "line_code": nil, "commit_id": "", "noteable_id": int64(mr.IID) + pr.id*1000,
			"system": false, "st_diff": nil, "action": action, "url": url, "type": nil, "internal": false},
		"merge_request": s.hookMergeRequest(pr, mr),
	})
}

// emitPipeline delivers a pipeline hook, with the open merge request of
// its ref when there is one.
func (s *Server) emitPipeline(pr *project, p *Pipeline) {
	builds := []any{}
	for _, j := range p.Jobs {
		builds = append(builds, map[string]any{"id": j.ID, "stage": "test", "name": j.Name, "status": j.Status,
			"allow_failure": false, "manual": false})
	}
	payload := map[string]any{
		"object_kind": "pipeline",
		"object_attributes": map[string]any{"id": p.ID, "iid": p.ID, "name": p.Name, "ref": p.Ref, "tag": false,
			"sha": p.SHA, "status": p.Status, "detailed_status": p.Status, "source": "merge_request_event",
			"stages": []string{"test"}, "created_at": noteStamp(s.clock()), "finished_at": noteStamp(s.clock())},
		"user": s.hookUser("root"), "project": s.hookProject(pr), "builds": builds,
	}
	for _, mr := range pr.mrs {
		if mr.State == "opened" && mr.SHA == p.SHA {
			payload["merge_request"] = s.hookMergeRequest(pr, mr)
		}
	}
	s.emit(pr, "Pipeline Hook", p.Status, payload)
}

// emitPush delivers a push hook of a branch moving from before to after.
func (s *Server) emitPush(pr *project, branch, before, after, pusher string) {
	u := s.users[strings.ToLower(pusher)]
	var uid int64
	if u != nil {
		uid = u.id
	}
	s.emit(pr, "Push Hook", "push", map[string]any{
		"object_kind": "push", "event_name": "push", "before": before, "after": after, "ref": "refs/heads/" + branch,
		"ref_protected": false, "checkout_sha": after, "user_id": uid, "user_name": pusher, "user_username": pusher,
		"user_email": "", "project_id": pr.id, "project": s.hookProject(pr), "total_commits_count": 1,
		"commits": []any{map[string]any{"id": after, "message": "A commit\n", "title": "A commit",
			"timestamp": hookStamp(s.clock()), "url": s.URL + "/" + pr.path + "/-/commit/" + after,
			"author": map[string]any{"name": pusher, "email": "[REDACTED]"}, "added": []string{}, "modified": []string{"README.md"}, "removed": []string{}}},
	})
}
