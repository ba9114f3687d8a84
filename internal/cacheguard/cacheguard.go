// Package cacheguard remembers a controller's own writes until its informer
// cache shows them: the one guard against acting on a cached object older
// than what this process just wrote.
//
// An informer cache delivers a process's own write a moment after the API
// server answered it. A pass started in between (woken by another event)
// would act on the state before the write: the operator would see a
// component whose undeploy Job it just started as if none had been, sync
// would not count an environment it just created against maxEnvironments,
// or delete again one it just deleted. Both remember their writes here and,
// while the cache lags, wait for it or ask the API server instead.
//
// resourceVersions are compared as the integers the API server issues
// (etcd revisions); one that does not parse turns the check off for it.
package cacheguard

import (
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Writes remembers the last write per key (an object's name or namespaced
// name), each in a group (sync's application; empty for the operator).
type Writes[K comparable] struct {
	mu sync.Mutex
	m  map[K]write
}

type write struct {
	group string
	// version is the resourceVersion of an apply; deleted is the UID of a
	// deletion.
	version uint64
	deleted types.UID
	// at is when it was written; applying is set while an apply is under
	// way (version is then that of the write before, if any).
	at       time.Time
	applying bool
}

// Object is a cached copy, as the guard reads it. An absent one is a nil
// interface, never a nil pointer in one.
type Object = metav1.Object

func (w *Writes[K]) set(key K, wr write) {
	if w.m == nil {
		w.m = map[K]write{}
	}
	w.m[key] = wr
}

// Applying records an apply about to be made; Applied or Abandon ends it.
func (w *Writes[K]) Applying(key K, group string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.m[key]
	w.set(key, write{group: group, version: prev.version, at: at, applying: true})
}

// Abandon ends an apply that was not made (or failed): what was written
// before it stays remembered. Once applied, it changes nothing.
func (w *Writes[K]) Abandon(key K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr, ok := w.m[key]
	switch {
	case !ok || !wr.applying:
	case wr.version == 0:
		delete(w.m, key)
	default:
		wr.applying = false
		w.m[key] = wr
	}
}

// Applied records a write the API server answered with resourceVersion.
func (w *Writes[K]) Applied(key K, group, resourceVersion string, at time.Time) {
	v, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set(key, write{group: group, version: v, at: at})
}

// Remember records a write for a caller that only asks Stale.
func (w *Writes[K]) Remember(key K, resourceVersion string) {
	w.Applied(key, "", resourceVersion, time.Time{})
}

// Removed records the deletion of the object with uid.
func (w *Writes[K]) Removed(key K, group string, uid types.UID, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set(key, write{group: group, deleted: uid, at: at})
}

// Forget drops what is remembered of key (the object is gone).
func (w *Writes[K]) Forget(key K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}

// Stale tells whether a cached copy at resourceVersion is older than the
// last apply remembered for key.
func (w *Writes[K]) Stale(key K, resourceVersion string) bool {
	w.mu.Lock()
	wr, ok := w.m[key]
	w.mu.Unlock()
	return ok && wr.deleted == "" && older(resourceVersion, wr.version)
}

// Unseen tells whether the cached copy of key (have; nil when the cache has
// none) does not show the last write remembered for it, written less than
// wait before now. An apply under way is unseen too; a deletion counts as
// shown once the copy is gone, another object or marked for deletion.
func (w *Writes[K]) Unseen(key K, have Object, now time.Time, wait time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wr, ok := w.m[key]
	if !ok || now.Sub(wr.at) >= wait {
		return false
	}
	return wr.applying || !shows(wr, have, true)
}

// Seen tells whether the cached objects show every write remembered in
// groups (applies under way aside: their pass knows what it writes); the
// writes they show are forgotten. keyOf names an object as the writes do.
func (w *Writes[K]) Seen(objects []Object, keyOf func(Object) K, groups []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return true
	}
	byKey := make(map[K]Object, len(objects))
	for _, o := range objects {
		byKey[keyOf(o)] = o
	}
	all := true
	for key, wr := range w.m {
		if !inGroups(wr.group, groups) || wr.applying {
			continue
		}
		if shows(wr, byKey[key], false) {
			delete(w.m, key)
		} else {
			all = false
		}
	}
	return all
}

// DropGone forgets the applies in groups whose object the API server's
// list (objects) no longer has, deleted by someone else: a cache would
// never show them.
func (w *Writes[K]) DropGone(objects []Object, keyOf func(Object) K, groups []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	present := make(map[K]bool, len(objects))
	for _, o := range objects {
		present[keyOf(o)] = true
	}
	for key, wr := range w.m {
		if wr.deleted == "" && !wr.applying && inGroups(wr.group, groups) && !present[key] {
			delete(w.m, key)
		}
	}
}

// shows tells whether have (nil: absent) shows wr. markedShows counts a
// copy marked for deletion as showing a deletion.
func shows(wr write, have Object, markedShows bool) bool {
	if wr.deleted != "" {
		return have == nil || have.GetUID() != wr.deleted || (markedShows && have.GetDeletionTimestamp() != nil)
	}
	return have != nil && !older(have.GetResourceVersion(), wr.version)
}

// older tells whether resourceVersion is an integer below version.
func older(resourceVersion string, version uint64) bool {
	v, err := strconv.ParseUint(resourceVersion, 10, 64)
	return err == nil && v < version
}

func inGroups(g string, groups []string) bool { return slices.Contains(groups, g) }
