package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// notifier wakes waiters whenever something was recorded.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// envTracker records, per EphemeralEnvironment of a namespace, when it was
// first seen Ready for its generation, when it failed, and when it was gone.
type envTracker struct {
	notifier
	mu     sync.Mutex
	seen   map[string]time.Time
	ready  map[string]time.Time
	gone   map[string]time.Time
	failed map[string]string
	known  map[string]bool
}

func trackEnvironments(ctx context.Context, c client.WithWatch, namespace string) *envTracker {
	t := &envTracker{seen: map[string]time.Time{}, ready: map[string]time.Time{}, gone: map[string]time.Time{}, failed: map[string]string{}, known: map[string]bool{}}
	synced := make(chan struct{})
	go benchkit.WatchLoop(ctx, c, func() client.ObjectList { return &petriv1.EphemeralEnvironmentList{} },
		[]client.ListOption{client.InNamespace(namespace)}, t.observe, t.listed, synced)
	select {
	case <-synced:
	case <-ctx.Done():
	}
	return t
}

// listed marks environments seen before and missing from a list as gone.
func (t *envTracker) listed(present map[string]bool) {
	now := time.Now()
	t.mu.Lock()
	for n := range t.known {
		if _, seen := t.gone[n]; !seen && !present[n] {
			t.gone[n] = now
		}
	}
	t.mu.Unlock()
	t.notify()
}

func (t *envTracker) observe(typ watch.EventType, o client.Object) {
	e, ok := o.(*petriv1.EphemeralEnvironment)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.known[e.Name] = true
	if _, ok := t.seen[e.Name]; !ok && typ != watch.Deleted {
		t.seen[e.Name] = now
	}
	switch {
	case typ == watch.Deleted:
		if _, seen := t.gone[e.Name]; !seen {
			t.gone[e.Name] = now
		}
	case e.DeletionTimestamp == nil:
		if _, seen := t.ready[e.Name]; !seen && isReady(e) {
			t.ready[e.Name] = now
		}
		if e.Status.Phase == petriv1.EnvironmentFailed || e.Status.Phase == petriv1.EnvironmentStalled {
			t.failed[e.Name] = describe(e)
		}
	}
	t.mu.Unlock()
	t.notify()
}

func isReady(e *petriv1.EphemeralEnvironment) bool {
	c := apimeta.FindStatusCondition(e.Status.Conditions, petriv1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == e.Generation
}

func describe(e *petriv1.EphemeralEnvironment) string {
	s := fmt.Sprintf("%s phase=%s", e.Name, e.Status.Phase)
	for _, c := range e.Status.Conditions {
		if c.Status != metav1.ConditionTrue || c.Type == petriv1.ConditionStalled {
			s += fmt.Sprintf(" [%s=%s %s: %s]", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return s
}

// forget drops what was recorded of the names (before they are created).
func (t *envTracker) forget(names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range names {
		delete(t.seen, n)
		delete(t.ready, n)
		delete(t.gone, n)
		delete(t.failed, n)
		delete(t.known, n)
	}
}

// created is when each of names was first seen.
func (t *envTracker) created(names []string) map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Time{}
	for _, n := range names {
		if at, ok := t.seen[n]; ok {
			out[n] = at
		}
	}
	return out
}

// waitAll waits until every name is ready (or gone, with gone set), or the
// timeout passes, and returns the times recorded and how many are missing.
func (t *envTracker) waitAll(ctx context.Context, names []string, gone bool, timeout time.Duration) (map[string]time.Time, int, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := t.changed()
		t.mu.Lock()
		src := t.ready
		if gone {
			src = t.gone
		}
		got := map[string]time.Time{}
		for _, n := range names {
			if at, ok := src[n]; ok {
				got[n] = at
			}
		}
		var failed []string
		if !gone {
			for _, n := range names {
				if msg, ok := t.failed[n]; ok {
					if _, ready := got[n]; !ready {
						failed = append(failed, msg)
					}
				}
			}
		}
		t.mu.Unlock()
		if len(got) == len(names) {
			return got, 0, nil
		}
		if len(failed) > 0 && len(got)+len(failed) == len(names) {
			return got, len(names) - len(got), fmt.Errorf("%d environments failed, first: %s", len(failed), failed[0])
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return got, len(names) - len(got), ctx.Err()
		case <-deadline.C:
			what := "Ready"
			if gone {
				what = "gone"
			}
			msg := fmt.Sprintf("%d of %d environments not %s within %s", len(names)-len(got), len(names), what, timeout)
			if len(failed) > 0 {
				msg += fmt.Sprintf("; %d failed, first: %s", len(failed), failed[0])
			}
			return got, len(names) - len(got), fmt.Errorf("%s", msg)
		}
	}
}

// jobTracker records when each Job of a namespace completed.
type jobTracker struct {
	notifier
	mu   sync.Mutex
	done map[string]time.Time
	// failed holds Jobs that failed, with their reason.
	failed map[string]string
}

func trackJobs(ctx context.Context, c client.WithWatch, namespace string) *jobTracker {
	t := &jobTracker{done: map[string]time.Time{}, failed: map[string]string{}}
	synced := make(chan struct{})
	go benchkit.WatchLoop(ctx, c, func() client.ObjectList { return &batchv1.JobList{} },
		[]client.ListOption{client.InNamespace(namespace)}, t.observe, nil, synced)
	select {
	case <-synced:
	case <-ctx.Done():
	}
	return t
}

func (t *jobTracker) observe(typ watch.EventType, o client.Object) {
	j, ok := o.(*batchv1.Job)
	if !ok || typ == watch.Deleted {
		return
	}
	now := time.Now()
	t.mu.Lock()
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			if _, seen := t.done[j.Name]; !seen {
				t.done[j.Name] = now
			}
		case batchv1.JobFailed:
			t.failed[j.Name] = c.Reason + ": " + c.Message
		}
	}
	t.mu.Unlock()
	t.notify()
}

// wait waits until the Jobs completed.
func (t *jobTracker) wait(ctx context.Context, names ...string) error {
	for {
		ch := t.changed()
		t.mu.Lock()
		n := 0
		var failed string
		for _, name := range names {
			if _, ok := t.done[name]; ok {
				n++
			}
			if msg, ok := t.failed[name]; ok {
				failed = name + ": " + msg
			}
		}
		t.mu.Unlock()
		if failed != "" {
			return fmt.Errorf("job %s", failed)
		}
		if n == len(names) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("jobs %v not complete: %w", names, ctx.Err())
		}
	}
}
