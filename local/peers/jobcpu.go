package peers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CountedCommand is the first argument by which cmd/petri-bench-peers runs
// a program and records its CPU time and peak memory (RunCounted): the
// local node plays Petri's deployer image with a script that runs the
// deployer so, since a Job's process lives a tenth of a second, too short
// for /proc to be read while it runs, and its CPU time is Petri's as much
// as the operator's is.
const CountedCommand = "counted"

// writeCountedScript writes an executable script at path that runs bin
// through self's CountedCommand, recording into acct.
func writeCountedScript(path, self, bin, acct string) error {
	script := fmt.Sprintf("#!/bin/sh\nexec %q %s %q %q \"$@\"\n", self, CountedCommand, bin, acct)
	return os.WriteFile(path, []byte(script), 0o755)
}

// RunCounted runs bin with args (stdin, stdout, stderr and the environment
// passed on, SIGTERM forwarded), appends one line "<cpu ns> <maxrss bytes>"
// to acct and returns the exit code.
func RunCounted(bin, acct string, args []string) int {
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 127
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
		if code < 0 {
			code = 128 + int(exit.Sys().(syscall.WaitStatus).Signal())
		}
	} else if err != nil {
		code = 1
	}
	if st := cmd.ProcessState; st != nil {
		cpu := st.UserTime() + st.SystemTime()
		var rss int64
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			rss = ru.Maxrss * 1024
		}
		if f, err := os.OpenFile(acct, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			_, _ = fmt.Fprintf(f, "%d %d\n", cpu.Nanoseconds(), rss)
			f.Close()
		}
	}
	return code
}

// jobUsage is what the counted processes recorded: their number, CPU time
// and the largest peak memory.
type jobUsage struct {
	Processes int
	CPU       time.Duration
	PeakRSS   int64
}

// parseCounted reads RunCounted's lines.
func parseCounted(data string) (jobUsage, error) {
	var u jobUsage
	for _, line := range strings.Split(strings.TrimSpace(data), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return u, fmt.Errorf("counted line %q: want two fields", line)
		}
		cpu, err1 := strconv.ParseInt(f[0], 10, 64)
		rss, err2 := strconv.ParseInt(f[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return u, fmt.Errorf("counted line %q: %w", line, err)
		}
		u.Processes++
		u.CPU += time.Duration(cpu)
		u.PeakRSS = max(u.PeakRSS, rss)
	}
	return u, nil
}

// readCounted reads acct (nothing recorded yet when it is missing).
func readCounted(acct string) (jobUsage, error) {
	data, err := os.ReadFile(acct)
	if errors.Is(err, os.ErrNotExist) {
		return jobUsage{}, nil
	}
	if err != nil {
		return jobUsage{}, err
	}
	return parseCounted(string(data))
}

// since is what was recorded after before.
func (u jobUsage) since(before jobUsage) jobUsage {
	return jobUsage{Processes: u.Processes - before.Processes, CPU: u.CPU - before.CPU, PeakRSS: u.PeakRSS}
}
