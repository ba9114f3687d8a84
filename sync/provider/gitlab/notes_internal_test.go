package gitlab

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The merge request of each note read is remembered, but not for ever: a
// project's history, and anyone who comments, would grow it without bound.
func TestRememberedNotesAreBounded(t *testing.T) {
	ns := &notes{byID: map[noteKey]int{}}
	for id := int64(1); id <= 3*maxNotes; id++ {
		ns.rememberNote("acme/shop", id, int(id%7))
	}
	assert.Len(t, ns.byID, maxNotes)
	assert.LessOrEqual(t, len(ns.order), 2*maxNotes)
	_, oldest := ns.byID[noteKey{repoKey("acme/shop"), 1}]
	assert.False(t, oldest, "the oldest note is forgotten first")
	n, newest := ns.byID[noteKey{repoKey("acme/shop"), 3 * maxNotes}]
	assert.True(t, newest)
	assert.Equal(t, int((3*maxNotes)%7), n)
}
