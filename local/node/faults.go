package node

import (
	"context"
	"fmt"
	"os"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KillContainer sends SIGKILL to the running process of one container of a
// pod (and its process group), the way a container dies when its process is
// killed on a node: the pod stays, and the container is started again under
// the pod's restartPolicy with its restart counted, as the kubelet does. Kill,
// in contrast, ends the whole pod. It returns once the signal is sent.
func (n *Node) KillContainer(ctx context.Context, namespace, pod, container string) error {
	p, err := n.client.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.mu.Lock()
	run, ok := n.running[p.UID]
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("pod %s/%s is not running on %s", namespace, pod, n.opts.Name)
	}
	proc := run.currentProcess(container)
	if proc == nil {
		return fmt.Errorf("container %s of pod %s/%s has no running process", container, namespace, pod)
	}
	if err := syscall.Kill(-proc.Pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill container %s of pod %s/%s: %w", container, namespace, pod, err)
	}
	return nil
}

func (r *podRun) setCurrent(container string, p *os.Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current == nil {
		r.current = map[string]*os.Process{}
	}
	if p == nil {
		delete(r.current, container)
		return
	}
	r.current[container] = p
}

func (r *podRun) currentProcess(container string) *os.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current[container]
}
