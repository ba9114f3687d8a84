package peers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// observation is what one system shows of one pull request's environment:
// whether it is there, and the head commit it is healthy at ("" when it is
// not healthy).
type observation struct {
	present bool
	healthy string
}

// tracker records when each pull request's environment reached what a
// phase waits for: healthy at the commit last sent, or gone.
type tracker struct {
	mu      sync.Mutex
	last    map[int]observation
	want    map[int]wanted
	reached map[int]time.Time
	changed chan struct{}
}

type wanted struct {
	sha   string
	gone  bool
	start time.Time
}

func newTracker() *tracker {
	return &tracker{last: map[int]observation{}, want: map[int]wanted{}, reached: map[int]time.Time{}, changed: make(chan struct{})}
}

// observe records what was seen of a pull request's environment now.
func (t *tracker) observe(number int, o observation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last[number] = o
	t.check(number, time.Now())
}

// check marks number reached when its last observation is what is wanted.
// Called with mu held.
func (t *tracker) check(number int, now time.Time) {
	w, ok := t.want[number]
	if !ok {
		return
	}
	if _, done := t.reached[number]; done {
		return
	}
	o := t.last[number]
	if (w.gone && !o.present) || (!w.gone && o.present && o.healthy == w.sha) {
		if now.Before(w.start) {
			now = w.start
		}
		t.reached[number] = now
		close(t.changed)
		t.changed = make(chan struct{})
	}
}

// expect starts a phase: number's environment is wanted healthy at sha (or
// gone) from start on.
func (t *tracker) expect(number int, sha string, gone bool, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want[number] = wanted{sha: sha, gone: gone, start: start}
	delete(t.reached, number)
}

// setStart moves a phase's start to when its webhook was sent.
func (t *tracker) setStart(number int, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.want[number]; ok {
		w.start = start
		t.want[number] = w
	}
}

// wait returns, for the numbers, how long each took from its start and the
// last time reached, once all reached or timeout passed (missing counts
// those that did not).
func (t *tracker) wait(ctx context.Context, numbers []int, timeout time.Duration) (took []time.Duration, last time.Time, missing int, err error) {
	deadline := time.After(timeout)
	for {
		t.mu.Lock()
		for _, n := range numbers {
			t.check(n, time.Now())
		}
		left := 0
		for _, n := range numbers {
			if _, ok := t.reached[n]; !ok {
				left++
			}
		}
		ch := t.changed
		if left == 0 {
			for _, n := range numbers {
				at := t.reached[n]
				took = append(took, at.Sub(t.want[n].start))
				if at.After(last) {
					last = at
				}
			}
			t.mu.Unlock()
			return took, last, 0, nil
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, time.Time{}, left, ctx.Err()
		case <-deadline:
			t.mu.Lock()
			for _, n := range numbers {
				if at, ok := t.reached[n]; ok {
					took = append(took, at.Sub(t.want[n].start))
					if at.After(last) {
						last = at
					}
				}
			}
			t.mu.Unlock()
			return took, last, left, fmt.Errorf("%d of %d not reached within %s", left, len(numbers), timeout)
		}
	}
}

// describe is the last observation of the numbers not reached, for errors.
func (t *tracker) describe(numbers []int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, n := range numbers {
		if _, ok := t.reached[n]; ok {
			continue
		}
		o := t.last[n]
		parts = append(parts, fmt.Sprintf("#%d present=%v healthy at %.7s (want %.7s gone=%v)", n, o.present, o.healthy, t.want[n].sha, t.want[n].gone))
		if len(parts) == 5 {
			break
		}
	}
	return strings.Join(parts, "; ")
}

// watchObjects lists and then watches the objects of list's kind in
// namespace until ctx ends, calling seen for every object and gone for
// every object deleted or missing from a later list; it lists again when a
// watch ends. ready is closed after the first list.
func watchObjects(ctx context.Context, c client.WithWatch, newList func() client.ObjectList, namespace string, seen func(client.Object), gone func(name string), ready chan<- struct{}) {
	// Both callbacks run on WatchLoop's goroutine.
	known := map[string]bool{}
	benchkit.WatchLoop(ctx, c, newList, []client.ListOption{client.InNamespace(namespace)},
		func(typ watch.EventType, o client.Object) {
			if typ == watch.Deleted {
				delete(known, o.GetName())
				gone(o.GetName())
				return
			}
			known[o.GetName()] = true
			seen(o)
		},
		func(present map[string]bool) {
			for name := range known {
				if !present[name] {
					gone(name)
				}
			}
			known = present
		}, ready)
}

// petriHealthy is the head commit an environment is Ready at: Ready for
// its generation, with that commit in its spec.
func petriHealthy(e *petriv1.EphemeralEnvironment) string {
	c := apimeta.FindStatusCondition(e.Status.Conditions, petriv1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != e.Generation || e.DeletionTimestamp != nil {
		return ""
	}
	return e.Spec.Source.SHA
}

// ApplicationGVK is Argo CD's Application.
var ApplicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// ArgoCDHealthy is the head commit an Application is Synced and Healthy at:
// the commit in the values it was last compared with, when its sync status
// is Synced and its health Healthy, with no operation running.
func ArgoCDHealthy(app map[string]any) string {
	if meta, _ := app["metadata"].(map[string]any); meta != nil && meta["deletionTimestamp"] != nil {
		return ""
	}
	sync, _, _ := unstructured.NestedString(app, "status", "sync", "status")
	health, _, _ := unstructured.NestedString(app, "status", "health", "status")
	if sync != "Synced" || health != "Healthy" {
		return ""
	}
	if phase, ok, _ := unstructured.NestedString(app, "status", "operationState", "phase"); ok && phase == "Running" {
		return ""
	}
	commit, _, _ := unstructured.NestedString(app, "status", "sync", "comparedTo", "source", "helm", "valuesObject", "commit")
	return commit
}

// prNumber reads the pull request number of an Application's name.
func prNumber(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, AppName+"-pr-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// trackPetri follows Petri's environments in namespace into t; names maps
// environment names to pull request numbers.
func trackPetri(ctx context.Context, c client.WithWatch, namespace string, names func(string) (int, bool), t *tracker) <-chan struct{} {
	ready := make(chan struct{})
	go watchObjects(ctx, c, func() client.ObjectList { return &petriv1.EphemeralEnvironmentList{} }, namespace,
		func(o client.Object) {
			e, ok := o.(*petriv1.EphemeralEnvironment)
			if n, known := names(o.GetName()); ok && known {
				t.observe(n, observation{present: true, healthy: petriHealthy(e)})
			}
		},
		func(name string) {
			if n, known := names(name); known {
				t.observe(n, observation{})
			}
		}, ready)
	return ready
}

// trackArgoCD follows Argo CD's Applications into t.
func trackArgoCD(ctx context.Context, c client.WithWatch, t *tracker) <-chan struct{} {
	ready := make(chan struct{})
	newList := func() client.ObjectList {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(ApplicationGVK.GroupVersion().WithKind("ApplicationList"))
		return l
	}
	go watchObjects(ctx, c, newList, ArgoCDNamespace,
		func(o client.Object) {
			u, ok := o.(*unstructured.Unstructured)
			if n, known := prNumber(o.GetName()); ok && known {
				t.observe(n, observation{present: true, healthy: ArgoCDHealthy(u.Object)})
			}
		},
		func(name string) {
			if n, known := prNumber(name); known {
				t.observe(n, observation{})
			}
		}, ready)
	return ready
}
