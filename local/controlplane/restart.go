package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// apiServerProcess is a kube-apiserver that RestartAPIServer started in
// place of envtest's.
type apiServerProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// RestartAPIServer kills kube-apiserver with SIGKILL, the way a crashed or
// evicted API server goes, keeps it down for down, and starts it again with
// the same flags: the same etcd (so every object is kept), the same serving
// port and certificates (so every client, kubeconfig and ServiceAccount token
// keeps working once it reconnects). It returns when the new API server is
// ready. Linux only: the running process is found through /proc.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	c.restartMu.Lock()
	defer c.restartMu.Unlock()
	pid, args, err := c.apiServerCommand()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill kube-apiserver (pid %d): %w", pid, err)
	}
	if c.apiServer != nil {
		<-c.apiServer.done
	} else if err := waitGone(ctx, pid); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	out, err := os.OpenFile(filepath.Join(c.Dir, "kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("start kube-apiserver again: %w", err)
	}
	p := &apiServerProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = out.Close(); close(p.done) }()
	c.apiServer = p
	return c.waitAPIServerReady(ctx, p, time.Minute)
}

// apiServerCommand finds the running kube-apiserver of this cluster (the
// one serving from its certificate directory) and its command line.
func (c *Cluster) apiServerCommand() (int, []string, error) {
	if p := c.apiServer; p != nil {
		select {
		case <-p.done:
			return 0, nil, errors.New("kube-apiserver is not running")
		default:
		}
		return p.cmd.Process.Pid, p.cmd.Args, nil
	}
	certDir := c.env.ControlPlane.GetAPIServer().CertDir
	if certDir == "" {
		return 0, nil, errors.New("kube-apiserver is not running")
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, fmt.Errorf("find kube-apiserver: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0})
		if filepath.Base(string(args[0])) != "kube-apiserver" {
			continue
		}
		out := make([]string, len(args))
		mine := false
		for i, a := range args {
			out[i] = string(a)
			if out[i] == "--cert-dir="+certDir {
				mine = true
			}
		}
		if mine {
			return pid, out, nil
		}
	}
	return 0, nil, fmt.Errorf("no kube-apiserver process serves from %s", certDir)
}

// waitGone waits until the process has exited and been reaped.
func waitGone(ctx context.Context, pid int) error {
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitAPIServerReady polls /readyz until the API server answers ok.
func (c *Cluster) waitAPIServerReady(ctx context.Context, p *apiServerProcess, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		body, err := c.Clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("kube-apiserver exited after its restart; see %s", filepath.Join(c.Dir, "kube-apiserver.log"))
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready %s after its restart: %v", timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopRestartedAPIServer stops an API server that RestartAPIServer started.
func (c *Cluster) stopRestartedAPIServer() {
	c.restartMu.Lock()
	defer c.restartMu.Unlock()
	p := c.apiServer
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
