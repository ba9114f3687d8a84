package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func testCapacity() *capacity {
	return newCapacity(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")})
}

// A waiter is granted in the order it arrived when room frees up, and what
// a waiter that gave up was given (granted and cancelled at once) is not
// lost: the node's room adds up again once every pod is gone.
func TestCapacityGrantsInOrderAndLosesNothing(t *testing.T) {
	c := testCapacity()
	ctx := context.Background()
	big, small := [2]int64{700, 0}, [2]int64{300, 0}
	require.NoError(t, c.acquire(ctx, nil, big))

	granted := make(chan string, 3)
	wait := func(name string, need [2]int64, stop chan struct{}) {
		go func() {
			if c.acquire(ctx, stop, need) == nil {
				granted <- name
			} else {
				granted <- name + " gave up"
			}
		}()
	}
	queued := func(n int) {
		require.Eventually(t, func() bool { return c.waitingCount() == n }, 5*time.Second, time.Millisecond)
	}
	wait("first", big, nil)
	queued(1)
	stop := make(chan struct{})
	wait("second", big, stop)
	queued(2)
	// small fits beside big now and passes both waiters.
	require.NoError(t, c.acquire(ctx, nil, small))

	close(stop)
	assert.Equal(t, "second gave up", <-granted)
	assert.Equal(t, 1, c.waitingCount())

	c.release(big)
	assert.Equal(t, "first", <-granted, "room goes to the waiter that came first")
	c.release(big)
	c.release(small)
	assert.Equal(t, [2]int64{0, 0}, c.used)
	assert.Zero(t, c.waitingCount())

	// Granted and given up in the same moment: cancel gives the grant back.
	w := &waiter{need: big, granted: make(chan struct{})}
	c.take(big)
	close(w.granted)
	c.cancel(w)
	assert.Equal(t, [2]int64{0, 0}, c.used)
}

// Requests are summed as the scheduler sums them: containers add up, init
// containers run one at a time, and overhead comes on top; the node never
// fits a pod larger than itself and says which resource.
func TestPodNeeds(t *testing.T) {
	req := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Resources: req("500m", "64Mi")}, {Resources: req("100m", "256Mi")}},
		Containers:     []corev1.Container{{Resources: req("100m", "64Mi")}, {Resources: req("200m", "64Mi")}},
		Overhead:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
	}}
	assert.Equal(t, [2]int64{510, 256 << 20}, podNeeds(pod))
	assert.Equal(t, [2]int64{0, 0}, podNeeds(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}), "no requests: always fits")

	c := testCapacity()
	assert.Empty(t, c.neverFits([2]int64{1000, 1 << 30}))
	assert.Contains(t, c.neverFits([2]int64{1001, 0}), "cpu (requests 1001m, the node has 1000m)")
	assert.Contains(t, c.neverFits([2]int64{0, 2 << 30}), "memory")
}
