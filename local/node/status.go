package node

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// known returns a copy of the newest version of a pod the node has seen
// (watched or written), or nil.
func (n *Node) known(uid types.UID) *corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.latest[uid]; p != nil {
		return p.DeepCopy()
	}
	return nil
}

// remember keeps p as the newest version of its pod the node has seen,
// unless a newer one is known. Only pods this node runs are kept.
func (n *Node) remember(p *corev1.Pod) {
	v, err := strconv.ParseUint(p.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, running := n.running[p.UID]; !running {
		return
	}
	if old := n.latest[p.UID]; old != nil {
		if ov, err := strconv.ParseUint(old.ResourceVersion, 10, 64); err == nil && ov >= v {
			return
		}
	}
	n.latest[p.UID] = p
}

// runningReportDelay is how long a pod that runs to completion may take
// before its Running status is written: one that finishes sooner is
// reported once, with its final status, as a kubelet's status sync finds
// it already finished. For such a pod a Running write, and the read
// before it, would tell no one anything (docs/benchmarks.md has what they
// cost).
const runningReportDelay = 100 * time.Millisecond

// reportRunning writes the pod's Running status (mutate) and closes the
// channel it returns when that is done or skipped. A pod that restarts its
// containers or probes their readiness (both write status while running)
// is reported at once; one that runs to completion (restartPolicy Never,
// no readiness probe) only if it has not finished (finished closed) within
// runningReportDelay.
func (n *Node) reportRunning(ctx context.Context, pod *corev1.Pod, finished <-chan struct{}, mutate func(*corev1.Pod)) <-chan struct{} {
	done := make(chan struct{})
	deferred := pod.Spec.RestartPolicy == corev1.RestartPolicyNever
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe != nil {
			deferred = false
		}
	}
	if !deferred {
		n.updateStatus(ctx, pod, mutate)
		close(done)
		return done
	}
	go func() {
		defer close(done)
		t := time.NewTimer(runningReportDelay)
		defer t.Stop()
		select {
		case <-finished:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.updateStatus(ctx, pod, mutate)
	}()
	return done
}

func (n *Node) fail(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	n.updateStatus(ctx, pod, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Reason = reason
		p.Status.Message = msg
		now := metav1.Now()
		for i, c := range p.Spec.Containers {
			setContainerState(p, i, c.Name, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 128, Reason: reason, Message: msg, StartedAt: now, FinishedAt: now,
			}}, false)
		}
	})
}

// updateStatus applies mutate to the freshest copy of the pod and writes the
// status subresource, retrying on conflicts.
func (n *Node) updateStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.Pod)) {
	// The newest copy the node knows (its own last write, or the watch's)
	// is tried first; a conflict means someone wrote since, and the pod is
	// read again.
	known := n.known(pod.UID)
	err := untilAnswered(ctx, func() error {
		return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur := known
			known = nil
			if cur == nil {
				var err error
				if cur, err = n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
					return err
				}
			}
			if cur.UID != pod.UID {
				return nil
			}
			mutate(cur)
			updated, err := n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			if err == nil {
				n.remember(updated)
			}
			return err
		})
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "local node: update status of pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
	}
}

// apiRetryLimit bounds how long a call waits for an API server that cannot
// be reached.
const apiRetryLimit = 5 * time.Minute

// untilAnswered calls fn again, with back-off, while the API server cannot
// be reached or does not answer (it restarts, it is overloaded), the way a
// kubelet keeps syncing pod status until the API server takes it. Any
// answer about the object itself (not found, conflict, refused) ends it.
func untilAnswered(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(apiRetryLimit)
	delay := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil || answered(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// answered tells an API server's answer about the request from a failure
// to get one.
func answered(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) ||
		apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsUnauthorized(err) || apierrors.IsGone(err) || apierrors.IsMethodNotSupported(err)
}

func setContainerState(p *corev1.Pod, i int, name string, state corev1.ContainerState, ready bool) {
	for len(p.Status.ContainerStatuses) <= i {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{})
	}
	cs := &p.Status.ContainerStatuses[i]
	cs.Name = name
	cs.Image = p.Spec.Containers[i].Image
	cs.ImageID = p.Spec.Containers[i].Image
	cs.State = state
	cs.Ready = ready
	started := state.Running != nil
	cs.Started = &started
}

func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		s := status
		if t == corev1.PodScheduled || t == corev1.PodInitialized {
			s = corev1.ConditionTrue
		}
		found := false
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == t {
				found = true
				if p.Status.Conditions[i].Status != s {
					p.Status.Conditions[i].Status = s
					p.Status.Conditions[i].LastTransitionTime = now
				}
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now})
		}
	}
}
