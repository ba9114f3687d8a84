// Package configrepo keeps an in-memory clone of the config repository
// (go-git) and reads the config files of one branch. It clones over https
// with a token, over ssh with a key, or from a local path.
package configrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Options say where the config repository is and how to authenticate.
type Options struct {
	// URL is an https:// or ssh:// URL, an scp-like git@host:path, or a
	// local path.
	URL string
	// Branch is the branch to read; main when empty.
	Branch string
	// Dir restricts reading to a directory of the repository.
	Dir string
	// TokenFile holds a token for https (sent as the password of
	// Username).
	TokenFile string
	// Username goes with the token; x-access-token when empty (GitHub).
	Username string
	// SSHKeyFile is a private key for ssh; KnownHostsFile verifies the host
	// (the user's known_hosts files when empty).
	SSHKeyFile     string
	KnownHostsFile string
	// CABundle adds trusted certificates for https.
	CABundle []byte
}

// Snapshot is the content of the config directory at one commit.
type Snapshot struct {
	Revision string
	Files    map[string][]byte
}

// Repo is a clone of the config repository.
type Repo struct {
	opts Options
	mu   sync.Mutex
	repo *git.Repository
}

// New validates the options; nothing is fetched yet.
func New(opts Options) (*Repo, error) {
	if opts.URL == "" {
		return nil, errors.New("config repository URL or path is required")
	}
	if opts.Branch == "" {
		opts.Branch = "main"
	}
	if opts.Username == "" {
		opts.Username = "x-access-token"
	}
	return &Repo{opts: opts}, nil
}

func (r *Repo) auth() (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(r.opts.URL)
	if err != nil {
		return nil, fmt.Errorf("config repository URL: %w", err)
	}
	switch ep.Protocol {
	case "https", "http":
		if r.opts.TokenFile == "" {
			return nil, nil
		}
		tok, err := os.ReadFile(r.opts.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("config repository token: %w", err)
		}
		return &githttp.BasicAuth{Username: r.opts.Username, Password: strings.TrimSpace(string(tok))}, nil
	case "ssh":
		if r.opts.SSHKeyFile == "" {
			return nil, nil
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeysFromFile(user, r.opts.SSHKeyFile, "")
		if err != nil {
			return nil, fmt.Errorf("config repository ssh key: %w", err)
		}
		var files []string
		if r.opts.KnownHostsFile != "" {
			files = append(files, r.opts.KnownHostsFile)
		}
		cb, err := gitssh.NewKnownHostsCallback(files...)
		if err != nil {
			return nil, fmt.Errorf("config repository known hosts: %w", err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	}
	return nil, nil
}

func (r *Repo) remoteRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName("origin", r.opts.Branch)
}

// Fetch brings the clone up to date (cloning it the first time) and reads
// the config files of the branch.
func (r *Repo) Fetch(ctx context.Context) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	auth, err := r.auth()
	if err != nil {
		return nil, err
	}
	if r.repo == nil {
		repo, err := git.Init(memory.NewStorage(), nil)
		if err != nil {
			return nil, err
		}
		if _, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{r.opts.URL}}); err != nil {
			return nil, err
		}
		r.repo = repo
	}
	spec := gitconfig.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", r.opts.Branch, r.remoteRef()))
	err = r.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []gitconfig.RefSpec{spec}, Auth: auth, CABundle: r.opts.CABundle, Force: true, Tags: git.NoTags})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, fmt.Errorf("fetch %s of %s: %w", r.opts.Branch, redact(r.opts.URL), err)
	}
	ref, err := r.repo.Reference(r.remoteRef(), true)
	if err != nil {
		return nil, fmt.Errorf("branch %s of %s: %w", r.opts.Branch, redact(r.opts.URL), err)
	}
	commit, err := r.repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, err
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, err
	}
	dir := strings.Trim(path.Clean("/"+r.opts.Dir), "/")
	if dir != "" {
		if tree, err = tree.Tree(dir); err != nil {
			return nil, fmt.Errorf("directory %s at %s: %w", dir, ref.Hash(), err)
		}
	}
	snap := &Snapshot{Revision: ref.Hash().String(), Files: map[string][]byte{}}
	err = tree.Files().ForEach(func(f *object.File) error {
		if !strings.HasSuffix(f.Name, ".yaml") && !strings.HasSuffix(f.Name, ".yml") {
			return nil
		}
		if f.Size > 1<<20 {
			return fmt.Errorf("%s is larger than 1 MiB", f.Name)
		}
		rd, err := f.Reader()
		if err != nil {
			return err
		}
		defer rd.Close()
		data, err := io.ReadAll(rd)
		if err != nil {
			return err
		}
		name := f.Name
		if dir != "" {
			name = dir + "/" + f.Name
		}
		snap.Files[name] = data
		return nil
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// redact drops credentials from a URL for messages.
func redact(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.Index(u[i+3:], "@"); j >= 0 && !strings.Contains(u[i+3:i+3+j], "/") {
			return u[:i+3] + "***@" + u[i+3+j+1:]
		}
	}
	return u
}
