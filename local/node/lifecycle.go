package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

type podRun struct {
	mu     sync.Mutex
	procs  []*os.Process
	killed bool
	// current is each container's running process (KillContainer).
	current map[string]*os.Process
	// stop is closed when the pod is killed.
	stop   chan struct{}
	exited chan struct{}
}

// forget drops a deleted pod; one still waiting for room on the node stops
// waiting.
func (n *Node) forget(pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	run, ok := n.running[pod.UID]
	if !ok {
		delete(n.done, pod.UID)
		return
	}
	if pod.Spec.NodeName == "" {
		run.kill()
	}
}

// defaultGracePeriod is Kubernetes' terminationGracePeriodSeconds when a
// pod gives none.
const defaultGracePeriod = 30 * time.Second

// gracePeriod is how long a deleted pod's containers have between SIGTERM
// and SIGKILL: the deletion's grace period, else the pod's
// terminationGracePeriodSeconds, else 30 seconds.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return defaultGracePeriod
}

func (n *Node) observe(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || ctx.Err() != nil {
		return
	}
	if pod.Spec.NodeName == n.opts.Name {
		n.remember(pod)
	}
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	switch {
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && !terminal && n.Handles(pod):
		n.mu.Lock()
		if _, ok := n.running[pod.UID]; ok || n.done[pod.UID] {
			n.mu.Unlock()
			return
		}
		run := &podRun{exited: make(chan struct{}), stop: make(chan struct{})}
		n.running[pod.UID] = run
		n.mu.Unlock()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.runPod(ctx, pod.DeepCopy(), run)
		}()
	case pod.Spec.NodeName == n.opts.Name:
		n.mu.Lock()
		run, isRunning := n.running[pod.UID]
		isDone := n.done[pod.UID]
		n.mu.Unlock()
		switch {
		case pod.DeletionTimestamp != nil:
			grace := gracePeriod(pod)
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				if isRunning {
					run.terminate(grace)
				}
				n.finishDeletion(ctx, pod)
			}()
		case !isRunning && !isDone && !terminal:
			// Bound to this node name but not started by this process: the
			// node restarted while it ran. Never run it again.
			n.markOrphan(ctx, pod.DeepCopy())
		}
	}
}

func (n *Node) finishDeletion(ctx context.Context, pod *corev1.Pod) {
	uid := pod.UID
	err := n.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "local node: delete pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
	}
}

func (n *Node) markOrphan(ctx context.Context, pod *corev1.Pod) {
	now := metav1.Now()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || cur.Status.Phase == corev1.PodSucceeded || cur.Status.Phase == corev1.PodFailed {
			return nil
		}
		n.mu.Lock()
		_, isRunning := n.running[pod.UID]
		n.mu.Unlock()
		if isRunning {
			return nil
		}
		cur.Status.Phase = corev1.PodFailed
		cur.Status.Reason = "NodeRestarted"
		cur.Status.Message = "the local node restarted while this pod ran; it is never run twice"
		for i, c := range cur.Spec.Containers {
			setContainerState(cur, i, c.Name, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: "NodeRestarted", StartedAt: now, FinishedAt: now,
			}}, false)
		}
		setReady(cur, false)
		_, err = n.client.CoreV1().Pods(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "local node: mark orphan pod %s/%s failed: %v\n", pod.Namespace, pod.Name, err)
	}
}

// Kill stops the process of a running pod with SIGKILL, the way a container
// runtime kills an out-of-memory container: the pod fails with exit code 137.
func (n *Node) Kill(namespace, name string) error {
	pod, err := n.client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.mu.Lock()
	run, ok := n.running[pod.UID]
	n.mu.Unlock()
	if !ok {
		return fmt.Errorf("pod %s/%s is not running on %s", namespace, name, n.opts.Name)
	}
	run.kill()
	<-run.exited
	return nil
}

func (r *podRun) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.killed {
		close(r.stop)
	}
	r.killed = true
	for _, p := range r.procs {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
}

// terminate stops a deleted pod the way the kubelet does: SIGTERM to every
// running container, SIGKILL to what still runs once grace has passed. No
// container starts or restarts after it is called. It returns when every
// container has ended; calling it again only waits.
func (r *podRun) terminate(grace time.Duration) {
	r.mu.Lock()
	first := !r.killed
	if first {
		close(r.stop)
		r.killed = true
		for _, p := range r.current {
			_ = syscall.Kill(-p.Pid, syscall.SIGTERM)
		}
	}
	r.mu.Unlock()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-r.exited:
	case <-timer.C:
		r.kill()
		<-r.exited
	}
}

func (r *podRun) isKilled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed
}

func (r *podRun) add(p *os.Process) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.killed {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		return false
	}
	r.procs = append(r.procs, p)
	return true
}

// runPod places, claims and runs a pod, then reports its outcome; it
// returns when every container has ended.
func (n *Node) runPod(ctx context.Context, pod *corev1.Pod, run *podRun) {
	defer n.exited(pod, run)
	release, ok := n.place(ctx, pod, run)
	if !ok {
		return
	}
	defer release()
	dir := filepath.Join(n.opts.Dir, "pods", string(pod.UID))
	env, ok := n.setUp(ctx, pod, dir, run.stop)
	if !ok {
		return
	}
	tokenCtx, stopTokens := context.WithCancel(ctx)
	defer stopTokens()
	go n.renewTokens(tokenCtx, pod, env.tokenFiles)
	n.runContainers(ctx, pod, dir, env, run)
}

// exited forgets a pod whose run has ended; it is never run again.
func (n *Node) exited(pod *corev1.Pod, run *podRun) {
	n.mu.Lock()
	delete(n.running, pod.UID)
	delete(n.latest, pod.UID)
	n.done[pod.UID] = true
	n.mu.Unlock()
	close(run.exited)
}

// setUp gives a claimed pod its ports and its files (volumes, kubeconfig,
// tokens); a pod that cannot have them is reported failed.
func (n *Node) setUp(ctx context.Context, pod *corev1.Pod, dir string, stop <-chan struct{}) (podEnv, bool) {
	ports, err := allocatePorts(pod)
	if err != nil {
		n.fail(ctx, pod, "CreateContainerError", err.Error())
		return podEnv{}, false
	}
	if len(ports) > 0 {
		if err := n.annotatePorts(ctx, pod, ports); err != nil {
			n.fail(ctx, pod, "CreateContainerError", err.Error())
			return podEnv{}, false
		}
	}
	// A Secret or ConfigMap a volume needs may not exist yet (the
	// namespace's kube-root-ca.crt is published a moment after the
	// namespace): the kubelet keeps trying to mount it, and so does this
	// node, until the pod is deleted.
	backoff := volumeRetryInitial
	for {
		env, err := n.prepare(ctx, pod, dir)
		if err == nil {
			env.ports = ports
			return env, true
		}
		if !apierrors.IsNotFound(err) {
			n.fail(ctx, pod, "CreateContainerConfigError", err.Error())
			return podEnv{}, false
		}
		if backoff == volumeRetryInitial {
			// Said once, where kubectl describe shows it.
			msg := "MountVolume.SetUp failed: " + err.Error()
			n.updateStatus(ctx, pod, func(p *corev1.Pod) {
				for i := range p.Spec.Containers {
					setContainerState(p, i, p.Spec.Containers[i].Name, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: msg}}, false)
				}
			})
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return podEnv{}, false
		case <-stop:
			t.Stop()
			return podEnv{}, false
		case <-t.C:
		}
		backoff = min(2*backoff, volumeRetryMax)
	}
}

// How often a volume whose Secret or ConfigMap is missing is tried again:
// doubled after each try, up to the cap.
const (
	volumeRetryInitial = 100 * time.Millisecond
	volumeRetryMax     = 5 * time.Second
)

// runContainers runs the pod's init containers one after the other, then
// its containers together, reporting Running and then the outcome.
func (n *Node) runContainers(ctx context.Context, pod *corev1.Pod, dir string, env podEnv, run *podRun) {
	start := metav1.Now()
	started := func(p *corev1.Pod) {
		if p.Status.StartTime == nil {
			p.Status.StartTime = &start
		}
		p.Status.HostIP, p.Status.PodIP = "127.0.0.1", "127.0.0.1"
		p.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
	}
	finished := make(chan struct{})
	reported := n.reportRunning(ctx, pod, finished, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		started(p)
		for i, c := range p.Spec.Containers {
			// A container with a readiness probe is ready once it passes.
			setContainerState(p, i, c.Name, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}, c.ReadinessProbe == nil)
		}
		setReady(p, allContainersReady(p))
	})
	finish := func() {
		close(finished)
		<-reported
	}

	for i := range pod.Spec.InitContainers {
		res := n.runContainer(ctx, pod, &pod.Spec.InitContainers[i], dir, env, run)
		if res.ExitCode != 0 {
			finish()
			n.updateStatus(ctx, pod, func(p *corev1.Pod) {
				p.Status.Phase = corev1.PodFailed
				p.Status.Reason = "InitContainerFailed"
				p.Status.Message = res.Message
				started(p)
				setReady(p, false)
			})
			return
		}
	}
	results := make([]corev1.ContainerStateTerminated, len(pod.Spec.Containers))
	var wg sync.WaitGroup
	for i := range pod.Spec.Containers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = n.superviseContainer(ctx, pod, i, dir, env, run)
		}(i)
	}
	wg.Wait()
	finish()
	if ctx.Err() != nil {
		return
	}
	n.updateStatus(ctx, pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		started(p)
		for i, c := range p.Spec.Containers {
			r := results[i]
			if r.ExitCode != 0 {
				p.Status.Phase = corev1.PodFailed
			}
			setContainerState(p, i, c.Name, corev1.ContainerState{Terminated: &r}, false)
		}
		setReady(p, false)
	})
}
