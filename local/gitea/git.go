package gitea

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Commit is one commit pushed to a branch.
type Commit struct {
	// Branch receives the commit; it is made when missing.
	Branch string
	// From is the branch a new Branch starts from; the default branch
	// (main) when empty. An empty repository gets Branch as its first.
	From string
	// Files are written (path to content) before committing.
	Files   map[string]string
	Message string
	// As pushes; the administrator when nil.
	As *User
}

// Push clones repository over HTTP (in memory), commits the files on the
// branch and pushes it, as a person would with git; it returns the new
// commit's SHA.
func (s *Server) Push(repository string, c Commit) (string, error) {
	as := &s.Admin
	if c.As != nil {
		as = c.As
	}
	if c.Branch == "" {
		return "", errors.New("push: no branch")
	}
	if c.From == "" {
		c.From = "main"
	}
	if c.Message == "" {
		c.Message = "Change " + c.Branch
	}
	auth := &githttp.BasicAuth{Username: as.Name, Password: as.Token}
	remote := s.URL + "/" + repository + ".git"
	fs := memfs.New()
	repo, err := git.Clone(memory.NewStorage(), fs, &git.CloneOptions{URL: remote, Auth: auth, NoCheckout: true})
	empty := errors.Is(err, transport.ErrEmptyRemoteRepository)
	switch {
	case empty:
		if repo, err = git.Init(memory.NewStorage(), fs); err != nil {
			return "", err
		}
		if _, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{remote}}); err != nil {
			return "", err
		}
		if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName(c.Branch))); err != nil {
			return "", err
		}
	case err != nil:
		return "", fmt.Errorf("clone %s: %w", repository, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", err
	}
	if !empty {
		start, err := repo.Reference(plumbing.NewRemoteReferenceName("origin", c.Branch), true)
		if err != nil {
			if start, err = repo.Reference(plumbing.NewRemoteReferenceName("origin", c.From), true); err != nil {
				return "", fmt.Errorf("push to %s: neither branch %s nor %s exists", repository, c.Branch, c.From)
			}
		}
		if err := wt.Checkout(&git.CheckoutOptions{Branch: plumbing.NewBranchReferenceName(c.Branch), Hash: start.Hash(), Create: true, Force: true}); err != nil {
			return "", fmt.Errorf("check out %s of %s: %w", c.Branch, repository, err)
		}
	}
	for path, content := range c.Files {
		f, err := fs.Create(path)
		if err != nil {
			return "", err
		}
		if _, err := f.Write([]byte(content)); err != nil {
			f.Close()
			return "", err
		}
		if err := f.Close(); err != nil {
			return "", err
		}
		if _, err := wt.Add(path); err != nil {
			return "", err
		}
	}
	sig := &object.Signature{Name: as.Name, Email: as.Name + "@example.com", When: time.Now()}
	hash, err := wt.Commit(c.Message, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true})
	if err != nil {
		return "", fmt.Errorf("commit on %s of %s: %w", c.Branch, repository, err)
	}
	ref := config.RefSpec("refs/heads/" + c.Branch + ":refs/heads/" + c.Branch)
	if err := repo.Push(&git.PushOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{ref}, Auth: auth}); err != nil {
		return "", fmt.Errorf("push %s to %s: %w", c.Branch, repository, err)
	}
	if err := s.waitBranch(repository, c.Branch, hash.String()); err != nil {
		return "", err
	}
	return hash.String(), nil
}

// waitBranch waits until Gitea's API shows the branch at the pushed commit.
// Gitea records a push in its database from a queue after the push has
// returned; a pull request opened from a branch it has not recorded yet is
// refused with 404.
func (s *Server) waitBranch(repository, branch, sha string) error {
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var b struct {
			Commit struct {
				ID string `json:"id"`
			} `json:"commit"`
		}
		err := s.Call(nil, http.MethodGet, "/repos/"+repository+"/branches/"+escapeSegments(branch), nil, &b)
		if err == nil && b.Commit.ID == sha {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gitea did not show %s of %s at %s within 30s (last error: %v)", branch, repository, sha, err)
		}
		<-tick.C
	}
}

// escapeSegments escapes each segment of a branch name such as feature/x
// (Gitea's branch route takes the slashes as they are).
func escapeSegments(branch string) string {
	parts := strings.Split(branch, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}
