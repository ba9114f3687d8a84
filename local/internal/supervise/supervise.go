// Package supervise runs a program of the benchmarks the way a kubelet runs
// a container under restartPolicy Always: a process that exits without
// having been asked to (a leader that lost its Lease, a crash, a kill) is
// started again after a back-off, and every restart is logged and counted.
// Without it, a benchmark's operator that exits leaves its environments
// where they are for the rest of the run, which no cluster would do.
package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// The kubelet's container restart back-off: 10 s, doubled after each
// restart up to 5 minutes, back to 10 s after a run of 10 minutes.
const (
	DefaultBackoff    = 10 * time.Second
	DefaultMaxBackoff = 5 * time.Minute
	DefaultResetAfter = 10 * time.Minute
)

// stopGrace is how long Stop waits after SIGTERM before it kills.
const stopGrace = 20 * time.Second

// Options say what to run and how to restart it.
type Options struct {
	// Name names the process in logs and errors.
	Name string
	// Path is the binary; Argv0, when set, the name it is run by.
	Path, Argv0 string
	// Args are its arguments; Env is added to this process's environment.
	Args, Env []string
	// LogPath receives the output of every run, appended, each restart
	// marked in it.
	LogPath string
	// Logf reports each restart; nil reports nowhere but the log file.
	Logf func(format string, args ...any)
	// ProcessGroup runs the process in a group of its own, so that Stop's
	// kill reaches the programs it started too.
	ProcessGroup bool
	// Backoff, MaxBackoff and ResetAfter time the restarts; zero is the
	// kubelet's (DefaultBackoff and the others).
	Backoff, MaxBackoff, ResetAfter time.Duration
}

// Process is a supervised program: one run at a time, started again after
// an exit that Stop did not ask for.
type Process struct {
	o Options

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current run has exited
	started  time.Time     // when the current run started
	stopping bool
	restarts int
	// pastCPU and pastPeak are the CPU time and the peak resident set of
	// the runs that exited.
	pastCPU  time.Duration
	pastPeak int64

	stop      chan struct{} // closed by Stop
	done      chan struct{} // closed once it runs no more
	firstExit chan struct{} // closed at the first exit Stop did not ask for
	onceExit  sync.Once
}

// Start runs the program and supervises it; the error is the first run's.
func Start(o Options) (*Process, error) {
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.ResetAfter <= 0 {
		o.ResetAfter = DefaultResetAfter
	}
	p := &Process{o: o, stop: make(chan struct{}), done: make(chan struct{}), firstExit: make(chan struct{})}
	if err := p.start(); err != nil {
		return nil, err
	}
	go p.supervise()
	return p, nil
}

// start begins one run.
func (p *Process) start() error {
	logFile, err := os.OpenFile(p.o.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.o.Path, p.o.Args...)
	if p.o.Argv0 != "" {
		cmd.Args[0] = p.o.Argv0
	}
	cmd.Env = append(os.Environ(), p.o.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if p.o.ProcessGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.o.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		if st := cmd.ProcessState; st != nil {
			p.pastCPU += st.UserTime() + st.SystemTime()
			if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
				p.pastPeak = max(p.pastPeak, ru.Maxrss*1024)
			}
		}
		p.mu.Unlock()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited, p.started = cmd, exited, time.Now()
	p.mu.Unlock()
	return nil
}

// supervise waits for each run to exit and starts the next after the
// back-off, until Stop.
func (p *Process) supervise() {
	defer close(p.done)
	backoff := p.o.Backoff
	for {
		p.mu.Lock()
		cmd, exited, started := p.cmd, p.exited, p.started
		p.mu.Unlock()
		<-exited
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if stopping {
			return
		}
		p.onceExit.Do(func() { close(p.firstExit) })
		if time.Since(started) > p.o.ResetAfter {
			backoff = p.o.Backoff
		}
		p.mu.Lock()
		p.restarts++
		n := p.restarts
		p.mu.Unlock()
		p.report("%s exited unexpectedly (%s) after %s; restart %d in %s", p.o.Name, cmd.ProcessState, time.Since(started).Round(time.Millisecond), n, backoff)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, p.o.MaxBackoff)
			if err := p.restart(); err == nil {
				break
			} else if errors.Is(err, errStopped) {
				return
			} else {
				p.report("%s: %v; next try in %s", p.o.Name, err, backoff)
			}
		}
	}
}

var errStopped = errors.New("stopped")

// restart starts the next run unless Stop came first.
func (p *Process) restart() error {
	p.mu.Lock()
	stopping := p.stopping
	p.mu.Unlock()
	if stopping {
		return errStopped
	}
	if err := p.start(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		// Stop came while it started: it signalled the run before.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	return nil
}

// report writes a line into the log file and to Logf.
func (p *Process) report(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if f, err := os.OpenFile(p.o.LogPath, os.O_WRONLY|os.O_APPEND, 0); err == nil {
		fmt.Fprintf(f, "--- %s %s\n", time.Now().UTC().Format(time.RFC3339), line)
		f.Close()
	}
	if p.o.Logf != nil {
		p.o.Logf("%s", line)
	}
}

// Stop ends the process with SIGTERM, kills it after 20 s, and restarts it
// no more.
func (p *Process) Stop() {
	p.mu.Lock()
	if !p.stopping {
		p.stopping = true
		close(p.stop)
	}
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	select {
	case <-exited:
	default:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			if p.o.ProcessGroup {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			} else {
				_ = cmd.Process.Kill()
			}
			<-exited
		}
	}
	<-p.done
}

// Done is closed once the process runs no more: after Stop.
func (p *Process) Done() <-chan struct{} { return p.done }

// FirstExit is closed the first time a run exits without Stop: a caller
// waiting for the program to come up knows it failed at start.
func (p *Process) FirstExit() <-chan struct{} { return p.firstExit }

// Restarts counts the runs started again after an unexpected exit.
func (p *Process) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Pid is the process id of the current run, and whether it runs (not
// while it waits to be started again, nor after Stop).
func (p *Process) Pid() (pid int, running bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.exited:
		return p.cmd.Process.Pid, false
	default:
		return p.cmd.Process.Pid, true
	}
}

// Signal sends sig to the current run (a test's kill).
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Signal(sig)
}

// Past is the CPU time (user and system, with the children each run
// waited for) and the peak resident set of the runs that exited, for a
// caller that adds the current run's from /proc.
func (p *Process) Past() (cpu time.Duration, peak int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pastCPU, p.pastPeak
}
