package peers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/petri-dev/petri/local/internal/benchkit"
)

// process is one of a system's programs running on this machine, so that
// /proc gives its CPU time and memory apart from the control plane's and
// the other system's.
type process struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

// startProcess runs bin with args and env (added to this process's
// environment), its output to logPath; argv0, when set, is the name it is
// run by (Argo CD's one binary acts by it).
func startProcess(name, bin, argv0 string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if argv0 != "" {
		cmd.Args[0] = argv0
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), logPath: logPath}
	go func() { _ = cmd.Wait(); logFile.Close(); close(p.done) }()
	return p, nil
}

// waitHTTP waits until url answers 200, the process exits or timeout
// passes.
func (p *process) waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	return p.waitFor(ctx, timeout, "not ready at "+url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// waitTCP waits until addr accepts connections.
func (p *process) waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	return p.waitFor(ctx, timeout, "not listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// waitFor tries up every 100ms until it holds, the process exits or
// timeout passes; notYet says, in the error, what did not hold.
func (p *process) waitFor(ctx context.Context, timeout time.Duration, notYet string, up func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if up() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s within %s; see %s", p.name, notYet, timeout, p.logPath)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start; see %s", p.name, p.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the process with SIGTERM and waits, killing it after 20s.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// usage is the process's CPU time so far, with its children's it waited
// for (the Helm and git processes Argo CD's repo-server runs), and its
// resident set high-water mark.
func (p *process) usage() (cpu time.Duration, peak int64, err error) {
	pid := p.cmd.Process.Pid
	if cpu, err = benchkit.ProcCPU(pid, true); err != nil {
		return 0, 0, err
	}
	peak, err = benchkit.ProcStatusBytes(pid, "VmHWM:")
	return cpu, peak, err
}

// resetPeak starts the resident set high-water mark again from the
// process's resident set now (clear_refs 5), so that each size has its own.
func (p *process) resetPeak() error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0o200)
}
