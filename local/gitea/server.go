// Package gitea runs a real Gitea server on this machine for the Gitea
// provider's tests and the local demo: the binary make gitea builds into
// bin/, in a temporary work directory with SQLite, an administrator and an
// access token, on a free loopback port. Helpers create what a forge holds
// (users, organisations, repositories, branches and commits pushed with
// go-git, pull requests, labels, comments, collaborators, commit statuses,
// webhooks) through Gitea's own API and git over HTTP, so what a test reads
// back is what Gitea answered.
//
// A server is stopped by Stop, which kills its process group and removes its
// work directory. Should the process that started it die first, Gitea is
// killed with it (the parent-death signal), and the next Start finds its pid
// file and cleans up what is left.
package gitea

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/petri-dev/petri/local/internal/reporoot"
)

// Options configure a Gitea server.
type Options struct {
	// Binary is the gitea executable; bin/gitea of the repository when
	// empty (make gitea builds it).
	Binary string
	// StaticDir holds Gitea's templates/ and options/; bin/gitea-static of
	// the repository when empty.
	StaticDir string
	// Dir is the work directory; a temporary one, removed by Stop, when
	// empty.
	Dir string
	// AdminName is the administrator's user name; "petri-admin" when empty.
	AdminName string
	// StartTimeout bounds the wait for the API to answer; a minute when
	// zero.
	StartTimeout time.Duration
}

// User is a Gitea account with its password and an access token. Neither
// is ever logged or written into an error.
type User struct {
	Name     string
	Password string
	Token    string
}

// Server is a running Gitea.
type Server struct {
	// URL is the server's root, such as http://127.0.0.1:43127, without a
	// trailing slash; the API is under URL + "/api/v1".
	URL string
	// Dir is the work directory (app.ini in custom/conf, the database,
	// the repositories and log/).
	Dir string
	// Admin is the site administrator created at start.
	Admin User

	binary  string
	ownDir  bool
	pidFile string
	client  *http.Client

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// Start starts a Gitea and waits until its API answers.
func Start(opts Options) (_ *Server, err error) {
	root, rerr := repoRoot()
	if opts.Binary == "" || opts.StaticDir == "" {
		if rerr != nil {
			return nil, rerr
		}
	}
	if opts.Binary == "" {
		opts.Binary = filepath.Join(root, "bin", "gitea")
	}
	if opts.StaticDir == "" {
		opts.StaticDir = filepath.Join(root, "bin", "gitea-static")
	}
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("gitea binary %s missing: run 'make gitea'", opts.Binary)
	}
	if _, err := os.Stat(filepath.Join(opts.StaticDir, "options")); err != nil {
		return nil, fmt.Errorf("gitea's options/ missing in %s: run 'make gitea'", opts.StaticDir)
	}
	if opts.AdminName == "" {
		opts.AdminName = "petri-admin"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = time.Minute
	}
	cleanStale()

	s := &Server{binary: opts.Binary, Dir: opts.Dir, client: &http.Client{Timeout: 30 * time.Second}}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "petri-gitea-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	for _, d := range []string{"custom/conf", "data", "log", "repositories", "home"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}

	runUser := "gitea"
	if u, err := user.Current(); err == nil {
		runUser = u.Username
	}
	ini := appINIValues{Dir: s.Dir, StaticDir: opts.StaticDir, RunUser: runUser, Root: os.Geteuid() == 0}
	if err := ini.newSecrets(); err != nil {
		return nil, err
	}
	if err := s.configure(&ini); err != nil {
		return nil, err
	}
	if err := s.run("migrate"); err != nil {
		return nil, err
	}
	password, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	s.Admin = User{Name: opts.AdminName, Password: password}
	if err := s.run("admin", "user", "create", "--admin", "--username", opts.AdminName,
		"--password", password, "--email", opts.AdminName+"@example.com", "--must-change-password=false"); err != nil {
		return nil, err
	}

	// The port is free when chosen, but another process may take it before
	// Gitea binds it: then another port is tried. (Handing Gitea the
	// listener through LISTEN_FDS is not an option: Gitea takes it for a
	// graceful restart and sends its parent SIGTERM.)
	for attempt := 1; ; attempt++ {
		err := s.startWeb(opts.StartTimeout)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return nil, err
		}
		s.removePidFile()
		if err := s.configure(&ini); err != nil {
			return nil, err
		}
	}
	if s.Admin.Token, err = s.createToken(s.Admin, "petri-admin", adminScopes); err != nil {
		return nil, err
	}
	return s, nil
}

// errPortTaken says Gitea could not bind the chosen port.
var errPortTaken = errors.New("gitea's port was taken")

// configure chooses a free loopback port and writes app.ini for it.
func (s *Server) configure(ini *appINIValues) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("find a free loopback port for gitea: %w", err)
	}
	ini.Port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.URL = fmt.Sprintf("http://127.0.0.1:%d", ini.Port)
	if err := writeAppINI(s.configPath(), *ini); err != nil {
		return fmt.Errorf("write gitea app.ini: %w", err)
	}
	return nil
}

// startWeb starts gitea web in a process group of its own, records its pid
// file and waits until its API answers.
func (s *Server) startWeb(timeout time.Duration) error {
	out, err := os.OpenFile(filepath.Join(s.Dir, "log", "web.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	s.cmd = s.command("web")
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start gitea web: %w", err)
	}
	done := make(chan struct{})
	s.done = done
	cmd := s.cmd
	go func() {
		s.waitErr = cmd.Wait()
		close(done)
	}()
	if s.pidFile, err = writePidFile(s.cmd.Process.Pid, s.Dir, s.ownDir); err != nil {
		return err
	}
	err = s.waitReady(timeout)
	if err != nil && !s.Running() && strings.Contains(s.logTail(), "address already in use") {
		return fmt.Errorf("%w: %v", errPortTaken, err)
	}
	return err
}

func (s *Server) removePidFile() {
	if s.pidFile != "" {
		_ = os.Remove(s.pidFile)
		s.pidFile = ""
	}
}

// StartT starts a Gitea for a test and stops it when the test ends.
func StartT(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := Start(opts)
	if err != nil {
		tb.Fatalf("start gitea: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) configPath() string { return filepath.Join(s.Dir, "custom", "conf", "app.ini") }

// command is gitea with the arguments, the work directory and the config.
func (s *Server) command(args ...string) *exec.Cmd {
	cmd := exec.Command(s.binary, append([]string{"--config", s.configPath(), "--work-path", s.Dir}, args...)...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(),
		"GITEA_WORK_DIR="+s.Dir,
		"GITEA_CUSTOM="+filepath.Join(s.Dir, "custom"),
		"HOME="+filepath.Join(s.Dir, "home"),
	)
	return cmd
}

// run runs a gitea subcommand to its end. The error names the subcommand,
// not its arguments (a password may be among them).
func (s *Server) run(args ...string) error {
	cmd := s.command(args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		name := strings.Join(args[:min(len(args), 3)], " ")
		return fmt.Errorf("gitea %s: %w\n%s", name, err, lastLines(string(out), 20))
	}
	return nil
}

// waitReady polls /api/v1/version until it answers 200, failing early
// when Gitea exits.
func (s *Server) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/version", nil)
		if resp, err := s.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("gitea web exited before answering: %v\n%s", s.waitErr, s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("gitea did not answer %s/api/v1/version within %s\n%s", s.URL, timeout, s.logTail())
		case <-tick.C:
		}
	}
}

// logTail is the end of Gitea's output and its log, for errors.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, f := range []string{"web.out", "gitea.log"} {
		if data, err := os.ReadFile(filepath.Join(s.Dir, "log", f)); err == nil && len(data) > 0 {
			fmt.Fprintf(&b, "--- %s\n%s\n", f, lastLines(string(data), 20))
		}
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop ends Gitea (TERM to its process group, KILL after ten seconds) and
// removes its work directory when Start made it. It is safe to call twice.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			pgid := s.cmd.Process.Pid
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-s.done
			}
			// Git processes Gitea left in its group go too.
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if s.ownDir && s.Dir != "" {
			_ = os.RemoveAll(s.Dir)
		}
		s.removePidFile()
	})
}

// Running reports whether the Gitea process is still alive.
func (s *Server) Running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Pid is the Gitea process's id (and its process group's).
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// repoRoot finds the repository root (the directory holding Petri's
// go.mod) from the working directory.
var repoRoot = reporoot.Find
