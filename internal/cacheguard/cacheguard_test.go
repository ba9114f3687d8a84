package cacheguard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
)

// The operator asks only whether a cached copy is older than its last
// write (sync's use, Seen and Unseen, is tested in sync/syncer).
func TestStaleTellsACacheOlderThanTheLastWrite(t *testing.T) {
	var w Writes[types.NamespacedName]
	k := types.NamespacedName{Namespace: "petri-system", Name: "web-pr1"}
	assert.False(t, w.Stale(k, "10"), "nothing written yet")
	w.Remember(k, "120")
	assert.True(t, w.Stale(k, "119"), "older than the last write")
	assert.True(t, w.Stale(k, "99"), "compared as numbers, not strings")
	assert.False(t, w.Stale(k, "120"), "the write itself")
	assert.False(t, w.Stale(k, "1000"), "newer")
	assert.False(t, w.Stale(types.NamespacedName{Namespace: "petri-system", Name: "other"}, "1"), "another object")
	assert.False(t, w.Stale(k, "not-a-number"), "opaque versions turn the check off")
	w.Remember(k, "opaque")
	assert.True(t, w.Stale(k, "119"), "an opaque version written keeps the last one known")
	w.Forget(k)
	assert.False(t, w.Stale(k, "1"), "forgotten once gone")
	w.Removed(k, "", "u1", time.Now())
	assert.False(t, w.Stale(k, "1"), "a deletion has no version to be older than")
}
