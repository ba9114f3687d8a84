package stack

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// makeConfigRepo makes a git repository from Options.ConfigSource
// (examples/app/config-repo). The one change is the ingress address in the
// URLs, when it is not the default.
func (s *Stack) makeConfigRepo() error {
	src := s.opts.ConfigSource
	addr := strings.TrimPrefix(s.IngressURL, "http://")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(s.ConfigRepo, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data = bytes.ReplaceAll(data, []byte(DefaultIngressAddress), []byte(addr))
		if s.RealNode != nil {
			data = realNodeConfig(data, s.RealNode.Registry)
		}
		switch s.opts.Forge {
		case ForgeGitea:
			data = giteaConfig(data)
		case ForgeGitLab:
			data = gitlabConfig(data)
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		return fmt.Errorf("config repository: %w", err)
	}
	if err := s.writeSpreadApplication(); err != nil {
		return fmt.Errorf("config repository: %w", err)
	}
	repo, err := git.PlainInitWithOptions(s.ConfigRepo, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		return fmt.Errorf("config repository: %w", err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return err
	}
	if err := wt.AddGlob("."); err != nil {
		return fmt.Errorf("config repository: %w", err)
	}
	_, err = wt.Commit("Petri config for the local run, from "+src, &git.CommitOptions{
		Author: &object.Signature{Name: "Petri", Email: "petri@localhost", When: time.Now()},
	})
	return err
}
