package syncer

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/render"
)

// listEnvironments lists the environments sync wrote for the applications
// of one repository (those whose application label names one of them) from
// sync's own cache, and from the API server while the cache has not yet
// shown one of sync's own writes for them.
//
// The cache spares a list request per reconcile, and its decoding: one more
// request per event for the API server otherwise (docs/benchmarks.md has
// what it cost sync). What the
// cache must never do is hide sync's own last write from the next
// reconcile: an environment just created would not count against
// maxEnvironments, one just deleted would be deleted again. ownWrites
// remembers each write until the cache shows it; until then the list is
// the API server's. Writes by others reach the cache through its watch like
// every change, a moment later.
func (s *Syncer) listEnvironments(ctx context.Context, apps []*config.Application, list *petriv1.EphemeralEnvironmentList) error {
	names := make([]string, 0, len(apps))
	for _, a := range apps {
		names = append(names, a.Name)
	}
	sel := labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: render.ManagedBy})
	in, err := labels.NewRequirement(render.LabelApplication, selection.In, names)
	if err != nil {
		return err
	}
	opts := []client.ListOption{client.InNamespace(s.opts.Namespace), client.MatchingLabelsSelector{Selector: sel.Add(*in)}}
	if err := s.cache.List(ctx, list, opts...); err == nil && s.writes.seen(list, names) {
		return nil
	}
	s.opts.Metrics.UncachedLists.Inc()
	if err := s.client.List(ctx, list, opts...); err != nil {
		return err
	}
	s.writes.dropGone(list, names)
	return nil
}

// ownWrites remembers sync's writes of environments (the resourceVersion an
// apply returned, the UID of a deletion) per application until sync's cache
// shows them.
type ownWrites struct {
	mu sync.Mutex
	m  map[string]ownWrite // environment name
}

type ownWrite struct {
	app string
	// version is the resourceVersion of an apply, as the integer the API
	// server issues; deleted is the UID of a deletion.
	version uint64
	deleted types.UID
	// at is when it was written; applying is set while an apply is under
	// way (version is then that of the write before, if any).
	at       time.Time
	applying bool
}

// applying records an apply about to be made; applied or abandon ends it.
func (w *ownWrites) applying(app, name string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]ownWrite{}
	}
	prev := w.m[name]
	w.m[name] = ownWrite{app: app, version: prev.version, at: at, applying: true}
}

// abandon ends an apply that was not made (or failed): what was written
// before it stays remembered. Once applied, it changes nothing.
func (w *ownWrites) abandon(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr, ok := w.m[name]
	switch {
	case !ok || !wr.applying:
	case wr.version == 0:
		delete(w.m, name)
	default:
		wr.applying = false
		w.m[name] = wr
	}
}

func (w *ownWrites) applied(app, name, resourceVersion string, at time.Time) {
	v, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]ownWrite{}
	}
	w.m[name] = ownWrite{app: app, version: v, at: at}
}

func (w *ownWrites) removed(app, name string, uid types.UID, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]ownWrite{}
	}
	w.m[name] = ownWrite{app: app, deleted: uid, at: at}
}

// unseenWait bounds how long feedback waits for the cache to show one of
// sync's writes (unseen): the watch shows it within milliseconds, and a
// write the cache never shows (the object was replaced meanwhile) must not
// hold the feedback back for longer.
const unseenWait = 5 * time.Second

// unseen tells whether the cache's copy of the named environment (nil when
// the cache has none) is older than sync's last write of it, written less
// than unseenWait before now: feedback from that copy would show the
// environment as it was before the write, and be written again a moment
// later when the watch shows the write. An apply under way is unseen too. A
// deletion counts as shown once the copy is marked for deletion.
func (w *ownWrites) unseen(name string, have *petriv1.EphemeralEnvironment, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr, ok := w.m[name]
	if !ok || now.Sub(wr.at) >= unseenWait {
		return false
	}
	if wr.applying {
		return true
	}
	if wr.deleted != "" {
		return have != nil && have.UID == wr.deleted && have.DeletionTimestamp == nil
	}
	if have == nil {
		return true
	}
	v, err := strconv.ParseUint(have.ResourceVersion, 10, 64)
	return err == nil && v < wr.version
}

// seen tells whether list (from the cache) shows every write remembered
// for apps; the writes it shows are forgotten.
func (w *ownWrites) seen(list *petriv1.EphemeralEnvironmentList, apps []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return true
	}
	byName := make(map[string]*petriv1.EphemeralEnvironment, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	all := true
	for name, wr := range w.m {
		if !slices.Contains(apps, wr.app) {
			continue
		}
		if wr.applying {
			// Under way: its pass knows what it writes.
			continue
		}
		e := byName[name]
		var shown bool
		if wr.deleted != "" {
			shown = e == nil || e.UID != wr.deleted
		} else if e != nil {
			v, err := strconv.ParseUint(e.ResourceVersion, 10, 64)
			shown = err != nil || v >= wr.version
		}
		if shown {
			delete(w.m, name)
		} else {
			all = false
		}
	}
	return all
}

// dropGone forgets applies of apps whose environment the API server's list
// no longer has (deleted by someone else): the cache would wait for them
// forever.
func (w *ownWrites) dropGone(list *petriv1.EphemeralEnvironmentList, apps []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	present := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		present[list.Items[i].Name] = true
	}
	for name, wr := range w.m {
		if wr.deleted == "" && !wr.applying && slices.Contains(apps, wr.app) && !present[name] {
			delete(w.m, name)
		}
	}
}
