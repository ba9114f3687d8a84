package peers

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	deadline := time.Now().Add(timeout)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %s; see %s", p.name, url, timeout, p.logPath)
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

// waitTCP waits until addr accepts connections.
func (p *process) waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s within %s; see %s", p.name, addr, timeout, p.logPath)
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
	if cpu, err = procCPU(pid); err != nil {
		return 0, 0, err
	}
	peak, err = procStatusBytes(pid, "VmHWM:")
	return cpu, peak, err
}

// resetPeak starts the resident set high-water mark again from the
// process's resident set now (clear_refs 5), so that each size has its own.
func (p *process) resetPeak() error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0o200)
}

// procCPU is a process's user and system CPU time with that of the
// children it waited for, from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(data))
}

// parseStatCPU reads utime, stime, cutime and cstime of a /proc stat line.
func parseStatCPU(s string) (time.Duration, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 || end+2 > len(s) {
		return 0, fmt.Errorf("malformed /proc stat: %q", s)
	}
	fields := strings.Fields(s[end+2:])
	if len(fields) < 15 {
		return 0, fmt.Errorf("short /proc stat: %q", s)
	}
	var ticks int64
	for _, f := range fields[11:15] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat field %q: %w", f, err)
		}
		ticks += v
	}
	// USER_HZ is 100 on Linux.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// procStatusBytes reads a field in kB of /proc/<pid>/status, in bytes.
func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("%s not found in /proc status", strings.TrimSuffix(field, ":"))
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
