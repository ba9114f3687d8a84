// Memory: what sync remembers between passes: the config revision, the
// state of each repository of it (repostate.go) with its pull requests'
// lifecycle states, each application's last pass for the read API, and
// whether this replica leads (manager.go). One lock guards all of it, the
// engine's: held only to read or change what it holds, never across a call
// to a forge or the API server, and never taken twice (the caller of a
// function that says it holds the lock does).

package syncer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/petri-dev/petri/internal/redact"
	"github.com/petri-dev/petri/sync/config"
)

// memory is sync's memory of the config and its repositories.
type memory struct {
	forges forgeSet
	clock  clock.Clock

	// mu is the engine's lock: it guards every field below, every
	// repoState and prLife, the leadership and the write budget.
	mu         sync.Mutex
	cfg        *config.Config
	repos      map[string]*repoState
	appStatus  map[string]*appStatus
	cacheReady bool
	// fileRepos is the repository of the application each config file
	// held when it was last whole ("" for a shared workload's file): a
	// broken file stands for it (stateprune.go).
	fileRepos map[string]string
	configErr error
}

type appStatus struct {
	LastReconcile time.Time
	LastError     string
	Kept          []string
}

func newMemory(forges forgeSet, clk clock.Clock) *memory {
	return &memory{forges: forges, clock: clk, repos: map[string]*repoState{}, appStatus: map[string]*appStatus{}}
}

// config is the current config revision; nil before the first.
func (m *memory) config() *config.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

// setCacheReady records that the environment cache is synced.
func (m *memory) setCacheReady() {
	m.mu.Lock()
	m.cacheReady = true
	m.mu.Unlock()
}

// ready is nil once the environment cache is synced and a config revision
// is loaded.
func (m *memory) ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !m.cacheReady:
		return errors.New("environment cache not synced")
	case m.cfg == nil && m.configErr != nil:
		// The answer of /readyz, which anyone may read.
		return fmt.Errorf("config repository not loaded: %w", redact.Error(m.configErr))
	case m.cfg == nil:
		return errors.New("config repository not loaded yet")
	}
	return nil
}

// repo returns the state of a repository, creating it; only for
// repositories of the current config. Readers use m.repos directly. The
// caller holds m.mu.
func (m *memory) repo(key string) *repoState {
	r := m.repos[key]
	if r == nil {
		r = newRepoState(key, &m.mu)
		m.repos[key] = r
	}
	return r
}

// configuredRepo returns the state of a repository of the current config;
// nil for any other.
func (m *memory) configuredRepo(key string) *repoState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.configured(key) {
		return nil
	}
	return m.repo(key)
}

// passOver starts a pass over a repository with what it works on: the
// repository's applications in the current config and its state. A
// repository that left the config has neither: whatever was remembered of
// it goes, and there is no pass (nil).
func (m *memory) passOver(key string) *observation {
	m.mu.Lock()
	defer m.mu.Unlock()
	if apps := m.appsOn(key); len(apps) > 0 {
		return &observation{repo: key, rs: m.repo(key), apps: apps}
	}
	delete(m.repos, key)
	m.forges.unlearnRepository(key)
	return nil
}

// knownRepo returns the state of a repository sync remembers; nil for any
// other. Unlike configuredRepo it never creates one.
func (m *memory) knownRepo(key string) *repoState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.repos[key]
}

// repoStates returns the state of every repository remembered.
func (m *memory) repoStates() []*repoState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*repoState, 0, len(m.repos))
	for _, rs := range m.repos {
		out = append(out, rs)
	}
	return out
}

// configured reports whether a repository has an application in the
// current config. The caller holds m.mu.
func (m *memory) configured(repo string) bool {
	if m.cfg == nil {
		return false
	}
	for _, a := range m.cfg.Applications {
		if a.RepositoryKey() == repo {
			return true
		}
	}
	return false
}

// forgetRepo drops everything remembered of a repository that left the
// config. The caller holds m.mu.
func (m *memory) forgetRepo(repo string) {
	delete(m.repos, repo)
	m.forges.unlearnRepository(repo)
}

// forgetPullRequest drops a closed pull request's state once its last
// feedback is posted, unless it was found open again meanwhile.
func (m *memory) forgetPullRequest(key prKey) {
	rs := m.knownRepo(key.Repo)
	if rs == nil || !rs.forgetPullRequest(key.Number) {
		return
	}
	m.forges.unlearnPullRequest(key.Repo, key.Number)
}

// appsOn returns the applications of the current config on a repository.
// The caller holds m.mu.
func (m *memory) appsOn(repo string) []*config.Application {
	if m.cfg == nil {
		return nil
	}
	var out []*config.Application
	for _, a := range m.cfg.Applications {
		if a.RepositoryKey() == repo {
			out = append(out, a)
		}
	}
	return out
}

// setAppError records a pass of applications that failed before their
// plan (err) or ended without an error (nil).
func (m *memory) setAppError(apps []*config.Application, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range apps {
		m.appStatusOf(a.Name).record(m.clock.Now(), err)
	}
}

// setAppStatus records an application's pass for the read API: when, what
// failed, and the environments kept because their pull request's state is
// unknown.
func (m *memory) setAppStatus(app *config.Application, kept []string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.appStatusOf(app.Name)
	st.Kept = kept
	st.record(m.clock.Now(), err)
}

// appStatusOf returns an application's status, creating it. The caller
// holds m.mu.
func (m *memory) appStatusOf(name string) *appStatus {
	st := m.appStatus[name]
	if st == nil {
		st = &appStatus{}
		m.appStatus[name] = st
	}
	return st
}

func (st *appStatus) record(at time.Time, err error) {
	st.LastReconcile = at
	st.LastError = ""
	if err != nil {
		st.LastError = err.Error()
	}
}

// stateSize counts what the in-memory maps hold; every entry belongs to an
// open pull request or a repository of the current config, so these stay
// bounded by what is open.
type stateSize struct {
	Repositories, Snapshots, Hints, PullRequests, Gates, Statuses, Applications int
	// Lives are pull requests whose lifecycle state is held, Commands the
	// command comments waiting.
	Lives, Commands int
}

func (m *memory) stateSize() stateSize {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := stateSize{Repositories: len(m.repos), Applications: len(m.appStatus)}
	for _, rs := range m.repos {
		n.Gates += len(rs.gates)
		n.Statuses += len(rs.statuses)
		n.Snapshots += len(rs.snapshots)
		n.Hints += len(rs.hints)
		n.PullRequests += len(rs.prs)
		n.Lives += len(rs.life)
		for _, cs := range rs.commands {
			n.Commands += len(cs)
		}
		n.Hints += len(rs.commentHints)
	}
	return n
}

// resyncAll marks every repository of the current config due for a
// resync (its open pull requests listed afresh, its recent comments read)
// and returns them.
func (m *memory) resyncAll() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var repos []string
	if m.cfg != nil {
		repos = m.cfg.Repositories()
	}
	for _, r := range repos {
		m.repo(r).resyncDue = true
	}
	return repos
}

// fetchFailed records a failed fetch of the config repository and returns
// the revision kept.
func (m *memory) fetchFailed(err error) *config.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.configErr = err
	return m.cfg
}

// fetched records a fetch of the config repository at revision and
// returns the revision kept and whether it is that one.
func (m *memory) fetched(revision string) (*config.Config, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.configErr = nil
	return m.cfg, m.cfg != nil && m.cfg.Revision == revision
}

// replace keeps a new revision and forgets what belonged to repositories
// and applications that left it (their environments are left as they
// are); it returns the repositories of the revision before and the
// applications that left.
func (m *memory) replace(cfg *config.Config) (old, goneApps []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg != nil {
		old = m.cfg.Repositories()
	}
	m.cfg = cfg
	m.fileRepos = fileRepositories(m.fileRepos, cfg)
	for _, r := range old {
		if !m.configured(r) {
			m.forgetRepo(r)
		}
	}
	apps := map[string]bool{}
	for _, a := range cfg.Applications {
		apps[a.Name] = true
	}
	for name := range m.appStatus {
		if !apps[name] {
			delete(m.appStatus, name)
			goneApps = append(goneApps, name)
		}
	}
	return old, goneApps
}

// fileRepositories is the repository of each config file's application
// as it was when the file was last whole (fileRepositories).
func (m *memory) fileRepositories() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fileRepos
}
