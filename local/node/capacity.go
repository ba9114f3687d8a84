package node

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultAllocatable is what the node offers pods unless Options.Allocatable
// says otherwise: the machine's CPUs and memory, as a kubelet with nothing
// reserved reports them.
func DefaultAllocatable() corev1.ResourceList {
	list := corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI)}
	var info syscall.Sysinfo_t
	if syscall.Sysinfo(&info) == nil {
		list[corev1.ResourceMemory] = *resource.NewQuantity(int64(info.Totalram)*int64(info.Unit), resource.BinarySI)
	}
	return list
}

// capacity places pods the way the scheduler places them on a node: the
// pods running here together never request more CPU or memory than the
// node's allocatable. A pod that does not fit now waits, unbound and
// Pending, until enough running pods have finished; waiting pods are
// placed in the order they arrived, and any pod that fits is placed at once,
// passing larger ones that still do not (the scheduler has no stricter
// order without priorities). Pods without requests always fit, as they do
// for the scheduler.
type capacity struct {
	mu          sync.Mutex
	allocatable [2]int64 // milli-CPU, bytes of memory; 0 means not limited
	used        [2]int64
	waiting     []*waiter
}

type waiter struct {
	need    [2]int64
	granted chan struct{}
}

func newCapacity(allocatable corev1.ResourceList) *capacity {
	c := &capacity{}
	if q, ok := allocatable[corev1.ResourceCPU]; ok {
		c.allocatable[0] = q.MilliValue()
	}
	if q, ok := allocatable[corev1.ResourceMemory]; ok {
		c.allocatable[1] = q.Value()
	}
	return c
}

// podNeeds is what a pod requests of CPU (milli) and memory (bytes), summed
// as the scheduler sums it: its containers' requests, or its largest init
// container's when that is more (init containers run one at a time, before
// the others), plus the pod's overhead. Sidecars (init containers that keep
// running) are not told apart.
func podNeeds(pod *corev1.Pod) [2]int64 {
	var sum, initMax [2]int64
	get := func(list corev1.ResourceList) [2]int64 {
		return [2]int64{list.Cpu().MilliValue(), list.Memory().Value()}
	}
	for _, c := range pod.Spec.Containers {
		r := get(c.Resources.Requests)
		sum[0], sum[1] = sum[0]+r[0], sum[1]+r[1]
	}
	for _, c := range pod.Spec.InitContainers {
		r := get(c.Resources.Requests)
		initMax[0], initMax[1] = max(initMax[0], r[0]), max(initMax[1], r[1])
	}
	o := get(pod.Spec.Overhead)
	return [2]int64{max(sum[0], initMax[0]) + o[0], max(sum[1], initMax[1]) + o[1]}
}

// neverFits names the resource a pod requests more of than the whole node
// has, or "" when it can be placed once the node is empty enough.
func (c *capacity) neverFits(need [2]int64) string {
	for i, name := range []string{"cpu", "memory"} {
		if c.allocatable[i] > 0 && need[i] > c.allocatable[i] {
			if i == 0 {
				return fmt.Sprintf("%s (requests %dm, the node has %dm)", name, need[i], c.allocatable[i])
			}
			return fmt.Sprintf("%s (requests %d bytes, the node has %d)", name, need[i], c.allocatable[i])
		}
	}
	return ""
}

func (c *capacity) fits(need [2]int64) bool {
	for i := range need {
		if c.allocatable[i] > 0 && c.used[i]+need[i] > c.allocatable[i] {
			return false
		}
	}
	return true
}

func (c *capacity) take(need [2]int64) {
	for i := range need {
		c.used[i] += need[i]
	}
}

// acquire waits until need fits beside the pods already placed and
// reserves it; the caller gives it back with release. It returns an error
// when ctx ends or stop is closed first (the pod was deleted, the node
// stopped).
func (c *capacity) acquire(ctx context.Context, stop <-chan struct{}, need [2]int64) error {
	c.mu.Lock()
	if c.fits(need) {
		c.take(need)
		c.mu.Unlock()
		return nil
	}
	w := &waiter{need: need, granted: make(chan struct{})}
	c.waiting = append(c.waiting, w)
	c.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
		c.cancel(w)
		return ctx.Err()
	case <-stop:
		c.cancel(w)
		return fmt.Errorf("stopped while waiting for room on the node")
	}
}

// cancel withdraws a waiter; one granted in the meantime gives back what it
// was given.
func (c *capacity) cancel(w *waiter) {
	c.mu.Lock()
	for i, o := range c.waiting {
		if o == w {
			c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
			c.mu.Unlock()
			return
		}
	}
	c.mu.Unlock()
	c.release(w.need)
}

// release gives back what a pod held and places the waiting pods that fit
// now, in the order they arrived.
func (c *capacity) release(need [2]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range need {
		c.used[i] -= need[i]
	}
	kept := c.waiting[:0]
	for _, w := range c.waiting {
		if c.fits(w.need) {
			c.take(w.need)
			close(w.granted)
			continue
		}
		kept = append(kept, w)
	}
	clear(c.waiting[len(kept):])
	c.waiting = kept
}

// waitingCount is how many pods wait for room.
func (c *capacity) waitingCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}
