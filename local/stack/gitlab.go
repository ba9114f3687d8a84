package stack

import (
	"bytes"
	"maps"
	"strings"

	"github.com/petri-dev/petri/local/gitlabapi"
)

// ForgeGitLab is the GitLab API stand-in (local/gitlabapi): the demo
// application's repository is GitLabProject on it, a project in a nested
// group, and sync reads it and reports to it through the GitLab provider,
// its merge request, note and pipeline hooks delivered to
// /webhooks/gitlab.
const ForgeGitLab = "gitlab"

// GitLabProject is the demo application's project on the GitLab
// stand-in: nested groups, so that its path is escaped in every API call
// and hashed into every name.
const GitLabProject = "petri-dev/platform/hello"

// GitLabForge is what the stack made on the GitLab stand-in.
type GitLabForge struct {
	// Server is the stand-in; tests seed and read its state directly.
	Server *gitlabapi.Server
	// API stands between sync and the stand-in: sync's -gitlab-url.
	API *FaultProxy
	// Sync is sync's identity (a Developer of the project); Developer may
	// give /petri commands (a Developer of the group, inherited); Guest
	// may not.
	Sync, Developer, Guest string
	// Token is sync's access token; WebhookSecret the group hook's secret
	// token.
	Token, WebhookSecret string
}

// startGitLab starts the stand-in with the demo's project and its members;
// the group hook to sync is made once sync runs (hookGitLab).
func (s *Stack) startGitLab(r *Report) error {
	step := r.Begin("GitLab: the GitLab API v4 stand-in (local/gitlabapi)")
	g := &GitLabForge{Sync: "petri-sync", Developer: "alice", Guest: "mallory", Token: "glpat-" + randomHex(10), WebhookSecret: randomHex(32)}
	g.Server = gitlabapi.New(gitlabapi.Options{Tokens: map[string]string{g.Token: g.Sync}})
	api, err := NewFaultProxy(g.Server.URL)
	if err != nil {
		g.Server.Close()
		return step.Fail(err)
	}
	g.API = api
	s.GitLab = g
	g.Server.AddProject(GitLabProject)
	g.Server.AddMember(GitLabProject, g.Sync, gitlabapi.Developer, "", false)
	g.Server.AddMember(GitLabProject, g.Developer, gitlabapi.Developer, "", true)
	g.Server.AddMember(GitLabProject, g.Guest, gitlabapi.Guest, "", false)
	step.Done(g.Server.URL)
	r.Event("GitLab: %s; sync acts as %s (Developer), %s may give commands (Developer of the group), %s may not (Guest)",
		GitLabProject, g.Sync, g.Developer, g.Guest)
	return nil
}

// hookGitLab makes the group hook of the project's top group to sync's
// GitLab endpoint, with the secret token.
func (s *Stack) hookGitLab(r *Report) {
	step := r.Begin("GitLab group hook to petri-sync")
	group, _, _ := strings.Cut(GitLabProject, "/")
	url := s.IngressURL + "/webhooks/" + ForgeGitLab
	s.GitLab.Server.AddHook(gitlabapi.Hook{URL: url, Token: s.GitLab.WebhookSecret, Under: group})
	step.Done(url)
}

// gitlabConfig names GitLab as the forge of the config repository's
// applications on the demo repository, and GitLabProject as their
// repository.
func gitlabConfig(data []byte) []byte {
	return bytes.ReplaceAll(data, []byte("\nrepository: "+DemoRepository+"\n"), []byte("\nforge: gitlab\nrepository: "+GitLabProject+"\n"))
}

// gitlabArgs and gitlabFiles are sync's flags and Secret files for GitLab.
func (s *Stack) gitlabArgs() []string {
	return []string{
		"-gitlab-url=" + s.GitLab.API.URL + "/",
		"-gitlab-token-file=/etc/petri-sync/secrets/gitlab-token",
		"-gitlab-webhook-secret-file=/etc/petri-sync/secrets/gitlab-webhook-secret",
	}
}

func (s *Stack) gitlabFiles() map[string]string {
	return map[string]string{"gitlab-token": s.GitLab.Token, "gitlab-webhook-secret": s.GitLab.WebhookSecret}
}

// SyncNotes are sync's notes on a merge request, oldest first.
func (g *GitLabForge) SyncNotes(iid int) []gitlabapi.Note {
	var out []gitlabapi.Note
	for _, n := range g.Server.Notes(GitLabProject, iid) {
		if strings.EqualFold(n.Author, g.Sync) {
			out = append(out, n)
		}
	}
	return out
}

// Award is sync's award emoji on a note; empty when it left none.
func (g *GitLabForge) Award(noteID int64) string {
	for _, a := range g.Server.Awards(GitLabProject) {
		if a.NoteID == noteID && strings.EqualFold(a.User, g.Sync) {
			return a.Name
		}
	}
	return ""
}

// forgeOverlay is what the install overlay adds for the forges beside
// GitHub: sync's flags (a JSON patch of its Deployment's arguments) and
// the Secret's files.
func (s *Stack) forgeOverlay() (patches string, files map[string]string) {
	var args []string
	files = map[string]string{}
	if s.Gitea != nil {
		args = append(args, s.giteaArgs()...)
		maps.Copy(files, s.giteaFiles())
	}
	if s.GitLab != nil {
		args = append(args, s.gitlabArgs()...)
		maps.Copy(files, s.gitlabFiles())
	}
	if len(args) == 0 {
		return "", files
	}
	patches = "patches:\n  - target: {kind: Deployment, name: petri-sync, namespace: " + SyncNamespace + "}\n    patch: |-\n"
	for _, a := range args {
		patches += "      - op: add\n        path: /spec/template/spec/containers/0/args/-\n        value: " + a + "\n"
	}
	return patches, files
}
