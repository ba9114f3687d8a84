package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// envLocks serialises the passes of the controllers that act on one
// environment (the main reconciler, sleep and wake): each pass reads the
// status the other's last pass wrote (the written guard makes the cache
// show it) and no two start Jobs of one environment at once.
type envLocks struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*envLock
}

type envLock struct {
	mu      sync.Mutex
	holders int
}

// lock waits for the environment's lock and returns its release.
func (l *envLocks) lock(key types.NamespacedName) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[types.NamespacedName]*envLock{}
	}
	e := l.m[key]
	if e == nil {
		e = &envLock{}
		l.m[key] = e
	}
	e.holders++
	l.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.holders--; e.holders == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}
