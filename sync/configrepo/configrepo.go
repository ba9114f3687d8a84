// Package configrepo reads the config files of one branch of the config
// repository (go-git), over https with a token, over ssh with a key, or from
// a local path.
//
// It keeps no clone. Each Fetch asks the remote for the branch's head (a
// reference advertisement, no objects) and returns the last snapshot while
// the head has not moved. When it moved, it fetches that one commit (depth 1)
// into a fresh object store on disk under Options.WorkDir, reads the config
// directory and removes the store: sync's memory holds the config files
// only, never the repository's history, however large the repository (a
// config directory inside a monorepo) or however long sync runs.
package configrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/petri-dev/petri/internal/redact"
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
	// WorkDir holds the object store of a fetch while it runs; the
	// system's temporary directory when empty.
	WorkDir string
	// Timeout bounds one Fetch, whatever the caller's context allows, so
	// that a git server that accepts the connection and then stalls cannot
	// hold up config updates and a new leader's first pass for good;
	// DefaultTimeout when zero.
	Timeout time.Duration
}

// DefaultTimeout bounds one Fetch: the reference advertisement and, when
// the head moved, that one commit's objects.
const DefaultTimeout = 5 * time.Minute

// Snapshot is the content of the config directory at one commit.
type Snapshot struct {
	Revision string
	Files    map[string][]byte
}

// Repo reads the config repository.
type Repo struct {
	opts Options
	mu   sync.Mutex
	// last is the snapshot of the head last read.
	last *Snapshot
	// fetched is the size of the objects the last fetch received.
	fetched int64
}

// objectCacheSize bounds the objects a fetch's store keeps in memory while
// the config directory is read.
const objectCacheSize = 4 * cache.MiByte

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

// Fetch reads the config files of the branch's head; while the head stays
// where it was, it returns the last snapshot without fetching objects.
// Its errors carry no credential of the URL or the token: they reach the
// logs and sync's readiness answer.
func (r *Repo) Fetch(ctx context.Context) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	timeout := r.opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the config repository did not answer within %s", timeout))
	defer cancel()
	auth, err := r.auth()
	if err != nil {
		return nil, redact.Error(err, redact.SecretsOf(r.opts.URL)...)
	}
	snap, err := r.fetch(ctx, auth)
	if err != nil {
		secrets := redact.SecretsOf(r.opts.URL)
		if b, ok := auth.(*githttp.BasicAuth); ok {
			secrets = append(secrets, b.Password)
		}
		return nil, redact.Error(err, secrets...)
	}
	return snap, nil
}

func (r *Repo) fetch(ctx context.Context, auth transport.AuthMethod) (*Snapshot, error) {
	head, err := r.head(ctx, auth)
	if err != nil {
		return nil, err
	}
	if r.last != nil && r.last.Revision == head.String() {
		r.fetched = 0
		return r.last, nil
	}
	work, err := os.MkdirTemp(r.opts.WorkDir, "petri-config-")
	if err != nil {
		return nil, fmt.Errorf("config repository work directory: %w", err)
	}
	defer os.RemoveAll(work)
	snap, err := r.fetchCommit(ctx, auth, work)
	if err != nil {
		return nil, err
	}
	r.last = snap
	return snap, nil
}

// FetchedBytes is the size of the objects the last Fetch received: 0 when
// the head had not moved, one commit's objects when it had.
func (r *Repo) FetchedBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetched
}

// head asks the remote where the branch is.
func (r *Repo) head(ctx context.Context, auth transport.AuthMethod) (plumbing.Hash, error) {
	remote := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{r.opts.URL}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth, CABundle: r.opts.CABundle})
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("list the branches of %s: %w", redact.URL(r.opts.URL), err)
	}
	want := plumbing.NewBranchReferenceName(r.opts.Branch)
	for _, ref := range refs {
		if ref.Name() == want {
			return ref.Hash(), nil
		}
	}
	return plumbing.ZeroHash, fmt.Errorf("branch %s of %s: %w", r.opts.Branch, redact.URL(r.opts.URL), plumbing.ErrReferenceNotFound)
}

// fetchCommit fetches the branch's head alone into a store under work and
// reads the config directory from it.
func (r *Repo) fetchCommit(ctx context.Context, auth transport.AuthMethod, work string) (*Snapshot, error) {
	repo, err := git.Init(filesystem.NewStorage(osfs.New(work), cache.NewObjectLRU(objectCacheSize)), nil)
	if err != nil {
		return nil, err
	}
	if _, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{r.opts.URL}}); err != nil {
		return nil, err
	}
	spec := gitconfig.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", r.opts.Branch, r.remoteRef()))
	err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []gitconfig.RefSpec{spec}, Depth: 1, Auth: auth, CABundle: r.opts.CABundle, Force: true, Tags: git.NoTags})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, fmt.Errorf("fetch %s of %s: %w", r.opts.Branch, redact.URL(r.opts.URL), err)
	}
	r.fetched = dirSize(work)
	ref, err := repo.Reference(r.remoteRef(), true)
	if err != nil {
		return nil, fmt.Errorf("branch %s of %s: %w", r.opts.Branch, redact.URL(r.opts.URL), err)
	}
	commit, err := repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, err
	}
	return r.read(commit)
}

// read takes the YAML files of the config directory at commit.
func (r *Repo) read(commit *object.Commit) (*Snapshot, error) {
	tree, err := commit.Tree()
	if err != nil {
		return nil, err
	}
	dir := strings.Trim(path.Clean("/"+r.opts.Dir), "/")
	if dir != "" {
		if tree, err = tree.Tree(dir); err != nil {
			return nil, fmt.Errorf("directory %s at %s: %w", dir, commit.Hash, err)
		}
	}
	snap := &Snapshot{Revision: commit.Hash.String(), Files: map[string][]byte{}}
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

// dirSize sums the sizes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
