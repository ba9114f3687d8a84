// The server's state and how tests seed and read it.

package gitlabapi

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Access levels GitLab gives members.
const (
	Guest      = 10
	Reporter   = 20
	Developer  = 30
	Maintainer = 40
	Owner      = 50
)

type user struct {
	id       int64
	username string
}

type member struct {
	level int
	state string
}

type project struct {
	id   int64
	path string
	// members by user id; inherited is the group's members, which
	// /members/all counts too.
	members   map[int64]member
	inherited map[int64]member
	mrs       map[int]*MergeRequest
	nextIID   int
	notes     map[int64]*Note
	awards    []Award
	statuses  []*CommitStatus
	pipelines []*Pipeline
	envs      []*Environment
	deploys   []*Deployment
	// labelEvents are each merge request's label events, oldest first.
	labelEvents map[int][]LabelEvent
}

// MergeRequest is a merge request as the server holds it.
type MergeRequest struct {
	IID   int
	Title string
	// State is opened (when empty), closed, merged or locked.
	State        string
	Draft        bool
	SourceBranch string
	TargetBranch string
	// SourceProject is the full path of the fork a merge request is from;
	// empty for one from the project itself.
	SourceProject string
	SHA           string
	Labels        []string
	Author        string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Note is a note on a merge request.
type Note struct {
	ID        int64
	IID       int
	Author    string
	Body      string
	System    bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Award is an award emoji on a note.
type Award struct {
	NoteID int64
	Name   string
	User   string
}

// CommitStatus is a commit status: an outside CI's, sync's, or a job's.
type CommitStatus struct {
	ID          int64
	SHA         string
	Name        string
	Status      string
	Description string
	TargetURL   string
}

// Pipeline is a pipeline of a commit and its jobs.
type Pipeline struct {
	ID     int64
	SHA    string
	Ref    string
	Name   string
	Status string
	Jobs   []Job
}

// Job is a job of a pipeline.
type Job struct {
	ID     int64
	Name   string
	Status string
}

// Environment is an environment of a project.
type Environment struct {
	ID          int64
	Name        string
	State       string
	ExternalURL string
}

// Deployment is a deployment of a commit to an environment.
type Deployment struct {
	ID          int64
	Environment string
	Ref         string
	SHA         string
	Status      string
	// User is the username of whoever created the deployment.
	User string
}

func (s *Server) id() int64 {
	s.nextID++
	return s.nextID
}

// AddUser creates a user (once) and returns its id.
func (s *Server) AddUser(username string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addUser(username)
}

func (s *Server) addUser(username string) int64 {
	if u := s.users[strings.ToLower(username)]; u != nil {
		return u.id
	}
	u := &user{id: s.id(), username: username}
	s.users[strings.ToLower(username)] = u
	return u.id
}

// RenameUser gives a user a new username, as a user may in their profile:
// the id stays, and the old username is free for anyone to register.
func (s *Server) RenameUser(from, to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[strings.ToLower(from)]
	if u == nil {
		panic("gitlabapi: no user " + from)
	}
	delete(s.users, strings.ToLower(from))
	u.username = to
	s.users[strings.ToLower(to)] = u
}

// AddProject creates a project at a full path (nested groups allowed) and
// returns its id.
func (s *Server) AddProject(path string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pr := s.projects[strings.ToLower(path)]; pr != nil {
		return pr.id
	}
	pr := &project{id: s.id(), path: path, members: map[int64]member{}, inherited: map[int64]member{},
		mrs: map[int]*MergeRequest{}, notes: map[int64]*Note{}}
	s.projects[strings.ToLower(path)] = pr
	s.byID[pr.id] = pr
	return pr.id
}

// AddMember makes a user a member of a project at an access level; state
// is active when empty (blocked, awaiting, ...). inherited says the
// membership is the group's, which /members/all shows too.
func (s *Server) AddMember(path, username string, level int, state string, inherited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.mustProject(path)
	uid := s.addUser(username)
	if state == "" {
		state = "active"
	}
	if inherited {
		pr.inherited[uid] = member{level, state}
	} else {
		pr.members[uid] = member{level, state}
	}
}

func (s *Server) mustProject(path string) *project {
	pr := s.projects[strings.ToLower(path)]
	if pr == nil {
		panic("gitlabapi: no project " + path)
	}
	return pr
}

// OpenMergeRequest adds a merge request (opened unless its State says
// otherwise) and returns its IID. Its author is created as a user.
func (s *Server) OpenMergeRequest(path string, mr MergeRequest) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.mustProject(path)
	pr.nextIID++
	mr.IID = pr.nextIID
	if mr.State == "" {
		mr.State = "opened"
	}
	if mr.TargetBranch == "" {
		mr.TargetBranch = "main"
	}
	if mr.SourceBranch == "" {
		mr.SourceBranch = "feature-" + strconv.Itoa(mr.IID)
	}
	if mr.Author == "" {
		mr.Author = "author"
	}
	s.addUser(mr.Author)
	now := s.clock()
	if mr.CreatedAt.IsZero() {
		mr.CreatedAt = now
	}
	mr.UpdatedAt = now
	pr.mrs[mr.IID] = &mr
	if mr.State == "opened" {
		s.emitMergeRequest(pr, &mr, "open", "", nil)
	}
	return mr.IID
}

// UpdateMergeRequest changes a merge request, touches its updated_at and
// delivers its hook: close, merge, reopen, or update (with oldrev when its
// head commit moved).
func (s *Server) UpdateMergeRequest(path string, iid int, change func(*MergeRequest)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.mustProject(path)
	mr := pr.mrs[iid]
	before := *mr
	before.Labels = slices.Clone(mr.Labels)
	change(mr)
	mr.IID = iid
	mr.UpdatedAt = s.clock()
	action, oldrev, changes := mergeRequestAction(before, *mr)
	s.emitMergeRequest(pr, mr, action, oldrev, changes)
}

// Push moves a branch of a project to a new head commit, as a git push
// does: a push hook, then every open merge request from the branch takes
// the commit and delivers its update hook with oldrev.
func (s *Server) Push(path, branch, sha, pusher string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.mustProject(path)
	s.addUser(pusher)
	before := ""
	for _, iid := range slices.Sorted(maps.Keys(pr.mrs)) {
		mr := pr.mrs[iid]
		if mr.SourceBranch != branch || mr.SourceProject != "" || mr.State != "opened" {
			continue
		}
		if before == "" {
			before = mr.SHA
			s.emitPush(pr, branch, before, sha, pusher)
		}
		old := mr.SHA
		mr.SHA, mr.UpdatedAt = sha, s.clock()
		s.emitMergeRequest(pr, mr, "update", old, nil)
	}
	if before == "" {
		s.emitPush(pr, branch, "0000000000000000000000000000000000000000", sha, pusher)
	}
}

// MergeRequest returns a merge request as the server holds it; false when
// the project or the merge request does not exist.
func (s *Server) MergeRequest(path string, iid int) (MergeRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.projects[strings.ToLower(path)]
	if pr == nil || pr.mrs[iid] == nil {
		return MergeRequest{}, false
	}
	mr := *pr.mrs[iid]
	mr.Labels = slices.Clone(mr.Labels)
	return mr, true
}

// DeleteMergeRequest deletes a merge request outright, as an owner may:
// nothing listed by updated_after says so.
func (s *Server) DeleteMergeRequest(path string, iid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.mustProject(path).mrs, iid)
}

// AddNote writes a note on a merge request, as its author would, touching
// the merge request; it returns the note's id.
func (s *Server) AddNote(path string, iid int, author, body string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.addNote(s.mustProject(path), iid, author, body, false)
	if err != nil {
		panic(err)
	}
	return n.ID
}

// EditNote changes a note's body as its author would, touching the merge
// request, and delivers the note hook with action update.
func (s *Server) EditNote(path string, id int64, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.mustProject(path)
	n := pr.notes[id]
	if n == nil {
		panic(fmt.Sprintf("gitlabapi: no note %d", id))
	}
	n.Body, n.UpdatedAt = body, s.clock()
	pr.mrs[n.IID].UpdatedAt = n.UpdatedAt
	s.emitNote(pr, n, "update")
}

// AddSystemNote writes a system note ("added 1 commit").
func (s *Server) AddSystemNote(path string, iid int, body string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.addNote(s.mustProject(path), iid, "", body, true)
	if err != nil {
		panic(err)
	}
	return n.ID
}

func (s *Server) addNote(pr *project, iid int, author, body string, system bool) (*Note, error) {
	mr := pr.mrs[iid]
	if mr == nil {
		return nil, errorf(http.StatusNotFound, "404 Merge Request Not Found")
	}
	if author != "" {
		s.addUser(author)
	}
	now := s.clock()
	n := &Note{ID: s.id(), IID: iid, Author: author, Body: body, System: system, CreatedAt: now, UpdatedAt: now}
	pr.notes[n.ID] = n
	mr.UpdatedAt = now
	s.emitNote(pr, n, "create")
	return n, nil
}

// DeleteNote deletes a note.
func (s *Server) DeleteNote(path string, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.mustProject(path).notes, id)
}

// Notes returns the notes of a merge request, oldest first, system notes
// included: what a test reads sync's note back from.
func (s *Server) Notes(path string, iid int) []Note {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Note
	for _, n := range s.mustProject(path).notes {
		if n.IID == iid {
			out = append(out, *n)
		}
	}
	slices.SortFunc(out, func(a, b Note) int { return int(a.ID - b.ID) })
	return out
}

// Awards returns the award emoji of a project's notes, in the order given:
// the reactions a test expects sync to have left.
func (s *Server) Awards(path string) []Award {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mustProject(path).awards)
}

// AddCommitStatus posts a commit status as an outside CI (or a job) would
// and returns its id.
func (s *Server) AddCommitStatus(path string, st CommitStatus) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	st.ID = s.id()
	s.mustProject(path).statuses = append(s.mustProject(path).statuses, &st)
	return st.ID
}

// CommitStatuses returns every commit status of a commit, oldest first.
func (s *Server) CommitStatuses(path, sha string) []CommitStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []CommitStatus
	for _, st := range s.mustProject(path).statuses {
		if st.SHA == sha {
			out = append(out, *st)
		}
	}
	return out
}

// AddPipeline adds a pipeline and its jobs and returns its id.
func (s *Server) AddPipeline(path string, p Pipeline) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.ID = s.id()
	p.Jobs = slices.Clone(p.Jobs)
	for i := range p.Jobs {
		p.Jobs[i].ID = s.id()
	}
	pr := s.mustProject(path)
	pr.pipelines = append(pr.pipelines, &p)
	s.emitPipeline(pr, &p)
	return p.ID
}

// Environments returns a project's environments.
func (s *Server) Environments(path string) []Environment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Environment
	for _, e := range s.mustProject(path).envs {
		out = append(out, *e)
	}
	return out
}

// Deployments returns a project's deployments, oldest first.
func (s *Server) Deployments(path string) []Deployment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Deployment
	for _, d := range s.mustProject(path).deploys {
		out = append(out, *d)
	}
	return out
}

// project finds a project by its id or full path, as the API names it.
func (s *Server) project(id string) (*project, error) {
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		if pr := s.byID[n]; pr != nil {
			return pr, nil
		}
	}
	if pr := s.projects[strings.ToLower(id)]; pr != nil {
		return pr, nil
	}
	return nil, errorf(http.StatusNotFound, "404 Project Not Found")
}
