package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// System binaries the node runs, from Debian's packages (make node installs
// them).
const (
	containerdPath = "/usr/bin/containerd"
	ctrPath        = "/usr/bin/ctr"
	runcPath       = "/usr/sbin/runc"
	cniBinDir      = "/usr/lib/cni"
	nsenterPath    = "/usr/bin/nsenter"
	unsharePath    = "/usr/bin/unshare"
	ipPath         = "/usr/sbin/ip"
	bashPath       = "/bin/bash"
)

// process is one long-running program of the node.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// command is exec.CommandContext with the settings every program of the
// node gets: its own process group (stopped as one) and SIGKILL when the
// process that started it dies, so a killed test does not leave it running.
func command(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// startProcess starts a long-running program whose output goes to
// name.log in the node's log directory.
func (n *Node) startProcess(name string, cmd *exec.Cmd) (*process, error) {
	log, err := os.Create(filepath.Join(n.Dir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cmd.Stdout == nil {
		cmd.Stdout = log
	}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); _ = log.Close(); close(p.done) }()
	n.procs = append(n.procs, p)
	return p, nil
}

// inNode runs a program in the node's network and mount namespaces (those
// of the holder process), not through ip netns exec, which would remount
// /sys and leave /sys/fs/cgroup empty.
func (n *Node) inNode(path string, args ...string) *exec.Cmd {
	full := append([]string{"--target", fmt.Sprint(n.holder.cmd.Process.Pid), "--mount", "--net", "--wd=" + n.Dir, "--", path}, args...)
	return exec.Command(nsenterPath, full...)
}

// exited reports an error when p has exited, naming its log.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited; see %s", p.name, p.log.Name())
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, and SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-p.done
}

// waitFor polls check every interval until it returns nil, the context ends
// or one of procs exits.
func waitFor(ctx context.Context, what string, timeout time.Duration, check func(context.Context) error, procs ...*process) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return fmt.Errorf("%s: %w (last: %v)", what, err, last)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
