package syncer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/sync/provider"
)

// Snapshots from webhooks are bounded per repository: the ones updated
// longest ago go first.
func TestSnapshotsAreBounded(t *testing.T) {
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	snaps := map[int]provider.PullRequest{}
	for n := 1; n <= 10; n++ {
		snaps[n] = provider.PullRequest{Number: n, UpdatedAt: at.Add(time.Duration(n) * time.Minute)}
		boundSnapshots(snaps, 4)
	}
	assert.Len(t, snaps, 4)
	for n := 7; n <= 10; n++ {
		assert.Contains(t, snaps, n, "the newest are kept")
	}
	// An old pull request updated now is kept over the oldest.
	snaps[1] = provider.PullRequest{Number: 1, UpdatedAt: at.Add(time.Hour)}
	boundSnapshots(snaps, 4)
	assert.Contains(t, snaps, 1)
	assert.NotContains(t, snaps, 7)
}
