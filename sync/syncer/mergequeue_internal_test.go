package syncer

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/webhook"
)

// A merge group's refresh mark is a valid annotation key for the largest
// pull request number a queue's ref may name, and reads back as the event
// it was made of; a destroyed group stays destroyed whatever mark of it is
// taken with it.
func TestMergeGroupMarks(t *testing.T) {
	sha := strings.Repeat("a", 40)
	for _, g := range []webhook.MergeGroup{{Number: 1<<31 - 1, HeadSHA: sha}, {Number: 7, HeadSHA: sha, Destroyed: true}} {
		mark := mergeGroupMark(&g)
		assert.Empty(t, validation.IsQualifiedName(petriv1.RefreshAnnotationPrefix+mark), mark)
		n, got, requested, ok := parseMergeGroupMark(mark)
		assert.True(t, ok, mark)
		assert.Equal(t, g.Number, n)
		assert.Equal(t, sha, got)
		assert.Equal(t, !g.Destroyed, requested)
	}
	for _, bad := range []string{"mg.", "mg.0." + sha, "mg.x." + sha, "mg.7.abc", "pr.7", markRepository} {
		_, _, _, ok := parseMergeGroupMark(bad)
		assert.False(t, ok, bad)
	}

	rs := newRepoState("acme/shop", new(sync.Mutex))
	now := time.Now()
	numbers := rs.takeGroupMarks(map[string]time.Time{"mgd.7." + sha: now, "mg.7." + sha: now, "pr.7": now})
	assert.Equal(t, []int{7, 7}, numbers)
	assert.Equal(t, map[string]bool{sha: false}, rs.pendingGroups(7), "destroyed wins")
	rs.mu.Lock()
	rs.noteGroup(7, sha, true)
	rs.mu.Unlock()
	assert.Equal(t, map[string]bool{sha: false}, rs.pendingGroups(7), "a destroyed group is not requested again")
	rs.doneGroups(7, map[string]bool{sha: false})
	assert.Empty(t, rs.pendingGroups(7))
}
