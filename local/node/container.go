package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Handles reports whether the node knows every image of the pod.
func (n *Node) Handles(pod *corev1.Pod) bool {
	if len(pod.Spec.Containers) == 0 {
		return false
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if _, ok := n.binary(c.Image); !ok {
			return false
		}
	}
	return true
}

func (n *Node) binary(image string) (string, bool) {
	b, ok := n.opts.Images[ImageName(image)]
	return b, ok
}

// ImageName is the key of Options.Images and Options.ImageFiles: an image
// reference without its tag and digest, so that every tag of an image is
// played by the same binary.
func ImageName(image string) string {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name
}

// runContainer runs one container to completion and returns its terminated
// state.
func (n *Node) runContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, dir string, podEnv podEnv, run *podRun) corev1.ContainerStateTerminated {
	started := metav1.Now()
	result := func(code int32, reason, msg string) corev1.ContainerStateTerminated {
		return corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: started, FinishedAt: metav1.Now()}
	}
	bin, _ := n.binary(c.Image)
	env, fromContainer, err := n.containerEnv(ctx, pod, c, podEnv)
	if err != nil {
		return result(128, "CreateContainerConfigError", err.Error())
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	localTerm := filepath.Join(dir, "termination-log-"+c.Name)
	_ = os.WriteFile(localTerm, nil, 0o666)
	rewrites := append(podEnv.rewrites(c), rewrite{from: termPath, to: localTerm})
	for from, to := range n.opts.ImageFiles[ImageName(c.Image)] {
		rewrites = append(rewrites, rewrite{from: from, to: to})
	}
	// Mounts shadow the image's own files, and the longest path wins.
	sort.SliceStable(rewrites, func(i, j int) bool { return len(rewrites[i].from) > len(rewrites[j].from) })

	argv := c.Args
	if len(c.Command) > 0 {
		argv = append(append([]string{}, c.Command[1:]...), c.Args...)
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = applyRewrites(expandVars(a, vars), rewrites)
	}
	for i := range args {
		args[i] = rewriteAddress(args[i], podEnv.ports)
	}
	for i, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); fromContainer[k] {
			env[i] = k + "=" + rewriteAddress(applyRewrites(v, rewrites), podEnv.ports)
		}
	}

	logFile, err := os.OpenFile(n.LogPath(pod.Namespace, pod.Name, c.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return result(128, "StartError", err.Error())
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return result(128, "StartError", err.Error())
	}
	if !run.add(cmd.Process) {
		_ = cmd.Wait()
		return result(137, "Killed", "killed before it started")
	}
	run.setCurrent(c.Name, cmd.Process)
	waitErr := cmd.Wait()
	run.setCurrent(c.Name, nil)
	code := int32(0)
	reason := "Completed"
	if waitErr != nil {
		reason = "Error"
		var exitErr *exec.ExitError
		if errors.As(waitErr, &exitErr) {
			code = int32(exitErr.ExitCode())
			if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int32(ws.Signal())
			}
		} else {
			code = 128
		}
	}
	msg := readTermination(localTerm)
	if msg == "" && code != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = tailFile(n.LogPath(pod.Namespace, pod.Name, c.Name), 2048, 80)
	}
	return result(code, reason, msg)
}

func readTermination(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	return strings.TrimSpace(string(b))
}

func tailFile(path string, maxBytes, maxLines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
