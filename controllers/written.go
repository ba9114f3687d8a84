package controllers

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// writtenVersions remembers, per environment, the resourceVersion its last
// write by this operator returned, so a pass can tell a cached object older
// than that write. The informer cache delivers an operator's own write a
// moment later; a pass started in between (woken by a Job's event) would
// act on the state before it: a component whose undeploy Job was just
// started would look as if none had been, and one deleted meanwhile would
// be created again under the same name instead of counting as gone.
//
// resourceVersions are compared as the integers the API server issues
// (etcd revisions); one that does not parse turns the check off for it.
type writtenVersions struct {
	m sync.Map // types.NamespacedName -> uint64
}

func (w *writtenVersions) remember(key types.NamespacedName, rv string) {
	if v, err := strconv.ParseUint(rv, 10, 64); err == nil {
		w.m.Store(key, v)
	}
}

func (w *writtenVersions) forget(key types.NamespacedName) { w.m.Delete(key) }

// stale tells whether rv is older than the last write remembered for key.
func (w *writtenVersions) stale(key types.NamespacedName, rv string) bool {
	last, ok := w.m.Load(key)
	if !ok {
		return false
	}
	v, err := strconv.ParseUint(rv, 10, 64)
	return err == nil && v < last.(uint64)
}
