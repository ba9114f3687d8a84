package peers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/petri-dev/petri/local/internal/benchkit"
	"github.com/petri-dev/petri/local/internal/supervise"
)

// process is one of a system's programs running on this machine, so that
// /proc gives its CPU time and memory apart from the control plane's and
// the other system's. It is supervised as a kubelet would run it: an exit
// that stop did not ask for (a leader that lost its Lease, a crash) is
// started again after a back-off, logged and counted (restarts).
type process struct {
	name    string
	sup     *supervise.Process
	logPath string
}

// startProcess runs bin with args and env (added to this process's
// environment), its output to logPath; argv0, when set, is the name it is
// run by (Argo CD's one binary acts by it). Restarts are reported to logf.
func startProcess(name, bin, argv0 string, args, env []string, logPath string, logf func(string, ...any)) (*process, error) {
	sup, err := supervise.Start(supervise.Options{
		Name: name, Path: bin, Argv0: argv0, Args: args, Env: env, LogPath: logPath,
		Logf: logf, ProcessGroup: true,
	})
	if err != nil {
		return nil, err
	}
	return &process{name: name, sup: sup, logPath: logPath}, nil
}

// restarts counts the times the process was started again.
func (p *process) restarts() int { return p.sup.Restarts() }

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
		case <-p.sup.FirstExit():
			return fmt.Errorf("%s exited at start; see %s", p.name, p.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the process with SIGTERM and waits, killing it after 20s; it
// is not started again.
func (p *process) stop() { p.sup.Stop() }

// usage is the CPU time of every run of the process so far, with its
// children's it waited for (the Helm and git processes Argo CD's
// repo-server runs), and the resident set high-water mark of its current
// run (or of its last, while it waits to be started again).
func (p *process) usage() (cpu time.Duration, peak int64, err error) {
	past, pastPeak := p.sup.Past()
	pid, running := p.sup.Pid()
	if !running {
		return past, pastPeak, nil
	}
	if cpu, err = benchkit.ProcCPU(pid, true); err != nil {
		return 0, 0, err
	}
	peak, err = benchkit.ProcStatusBytes(pid, "VmHWM:")
	return past + cpu, peak, err
}

// resetPeak starts the resident set high-water mark again from the
// process's resident set now (clear_refs 5), so that each size has its own.
func (p *process) resetPeak() error {
	pid, running := p.sup.Pid()
	if !running {
		return nil
	}
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0o200)
}
