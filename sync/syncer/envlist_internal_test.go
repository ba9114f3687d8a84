package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

func envList(items ...petriv1.EphemeralEnvironment) *petriv1.EphemeralEnvironmentList {
	return &petriv1.EphemeralEnvironmentList{Items: items}
}

func cachedEnv(name, uid, rv string) petriv1.EphemeralEnvironment {
	return petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), ResourceVersion: rv}}
}

// The cache is trusted for an application only once it shows every write
// sync made for it: an apply at its resourceVersion or later, a deletion
// as gone (or replaced by another object of the name).
func TestOwnWritesHoldTheCacheBackUntilItShowsThem(t *testing.T) {
	var w ownWrites
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	assert.True(t, w.seen(envList(), []string{"shop"}), "nothing written: the cache is used")

	w.applied("shop", "shop-pr1", "100", at)
	assert.False(t, w.seen(envList(), []string{"shop"}), "a created environment the cache does not have yet")
	assert.False(t, w.seen(envList(cachedEnv("shop-pr1", "u1", "99")), []string{"shop"}), "the cache has the version before the write")
	assert.True(t, w.seen(envList(), []string{"other"}), "another application's write does not hold its lists back")
	assert.True(t, w.seen(envList(cachedEnv("shop-pr1", "u1", "100")), []string{"shop"}))
	assert.True(t, w.seen(envList(), []string{"shop"}), "a write the cache showed once is forgotten")

	w.removed("shop", "shop-pr1", "u1", at)
	assert.False(t, w.seen(envList(cachedEnv("shop-pr1", "u1", "120")), []string{"shop"}), "a deleted environment still in the cache")
	assert.True(t, w.seen(envList(cachedEnv("shop-pr1", "u2", "130")), []string{"shop"}), "a new object of the name is not the deleted one")

	// An environment someone else deleted before the cache showed sync's
	// apply: the API server's list lets it go.
	w.applied("shop", "shop-pr2", "200", at)
	w.dropGone(envList(), []string{"shop"})
	assert.True(t, w.seen(envList(), []string{"shop"}))
}

// Feedback waits for the cache to show sync's own last write of an
// environment, but not for longer than unseenWait.
func TestUnseenWritesHoldFeedbackBackForAMoment(t *testing.T) {
	var w ownWrites
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	old := cachedEnv("shop-pr1", "u1", "99")
	assert.False(t, w.unseen("shop-pr1", &old, at), "nothing written")
	w.applied("shop", "shop-pr1", "100", at)
	assert.True(t, w.unseen("shop-pr1", &old, at), "the cache has the version before the write")
	assert.True(t, w.unseen("shop-pr1", nil, at), "a created environment the cache does not have yet")
	shown := cachedEnv("shop-pr1", "u1", "100")
	assert.False(t, w.unseen("shop-pr1", &shown, at))
	assert.False(t, w.unseen("shop-pr1", &old, at.Add(unseenWait)), "a write the cache never shows holds nothing back for long")

	w.applying("shop", "shop-pr1", at)
	assert.True(t, w.unseen("shop-pr1", &shown, at), "an apply under way")
	assert.True(t, w.seen(envList(), []string{"shop"}), "an apply under way holds no list back")
	w.abandon("shop-pr1")
	assert.False(t, w.unseen("shop-pr1", &shown, at), "an apply that was not made")
	w.applying("shop", "shop-pr1", at)
	w.applied("shop", "shop-pr1", "101", at)
	w.abandon("shop-pr1")
	assert.True(t, w.unseen("shop-pr1", &shown, at), "made: abandon changes nothing")
	assert.False(t, w.seen(envList(shown), []string{"shop"}))

	w.removed("shop", "shop-pr1", "u1", at)
	assert.True(t, w.unseen("shop-pr1", &shown, at), "deleted, and the cache's copy is not marked for deletion yet")
	shown.DeletionTimestamp = &metav1.Time{Time: at}
	assert.False(t, w.unseen("shop-pr1", &shown, at), "the copy being deleted shows the deletion")
	assert.False(t, w.unseen("shop-pr1", nil, at), "gone")
}
