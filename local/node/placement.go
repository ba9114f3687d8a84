package node

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Waiting returns how many pods wait for room on the node: their requests
// do not fit beside the pods running here yet.
func (n *Node) Waiting() int { return n.capacity.waitingCount() }

// place waits until the pod's requests fit on the node and binds the pod
// here. It reports false when the pod is not this node's to run (it never
// fits, it was deleted while waiting, another binding won); otherwise the
// caller gives the room back with release when the pod has ended.
func (n *Node) place(ctx context.Context, pod *corev1.Pod, run *podRun) (release func(), ok bool) {
	need := podNeeds(pod)
	if why := n.capacity.neverFits(need); why != "" {
		n.unschedulable(ctx, pod, "0/1 nodes are available: 1 Insufficient "+why+".")
		return nil, false
	}
	if err := n.capacity.acquire(ctx, run.stop, need); err != nil {
		return nil, false
	}
	release = func() { n.capacity.release(need) }
	err := untilAnswered(ctx, func() error {
		return n.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: n.opts.Name},
		}, metav1.CreateOptions{})
	})
	if err != nil && !n.boundHere(ctx, pod) {
		// Someone else bound it, or it is gone: not ours to run.
		release()
		return nil, false
	}
	return release, true
}

// boundHere tells whether a pod whose binding was refused is bound to this
// node after all: a binding the API server made whose answer was lost (the
// API server restarted mid-request) is retried and refused as already
// bound, by this node's own first request.
func (n *Node) boundHere(ctx context.Context, pod *corev1.Pod) bool {
	var cur *corev1.Pod
	err := untilAnswered(ctx, func() error {
		var err error
		cur, err = n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err
	})
	return err == nil && cur.UID == pod.UID && cur.Spec.NodeName == n.opts.Name && cur.DeletionTimestamp == nil
}

// unschedulable reports a pod the node can never place, as the scheduler
// does: Pending, with PodScheduled false.
func (n *Node) unschedulable(ctx context.Context, pod *corev1.Pod, msg string) {
	n.updateStatus(ctx, pod, func(p *corev1.Pod) {
		c := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()}
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodScheduled {
				p.Status.Conditions[i] = c
				return
			}
		}
		p.Status.Conditions = append(p.Status.Conditions, c)
	})
}
