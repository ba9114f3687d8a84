package syncer

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/sync/provider"
)

// A webhook's snapshot is preferred over the listing only while the listing
// may lag behind it: a snapshot dated in the future (forged, or from a skewed
// clock) or older than the lag window never overrides what GitHub lists.
func TestSnapshotsOverrideTheListingOnlyWithinTheLagWindow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	listed := []provider.PullRequest{
		{Number: 1, State: "open", HeadSHA: "listed1", UpdatedAt: now.Add(-time.Hour)},
		{Number: 2, State: "open", HeadSHA: "listed2", UpdatedAt: now.Add(-time.Hour)},
		{Number: 3, State: "open", HeadSHA: "listed3", UpdatedAt: now.Add(-time.Hour)},
	}
	rs := &repoState{mu: new(sync.Mutex), snapshots: map[int]provider.PullRequest{
		// A push a minute ago the listing has not caught up with: used.
		1: {Number: 1, State: "open", HeadSHA: "pushed", UpdatedAt: now.Add(-time.Minute)},
		// Dated a year ahead: it would win over every future listing.
		2: {Number: 2, State: "closed", HeadSHA: "forged", UpdatedAt: now.Add(365 * 24 * time.Hour)},
		// Newer than the listing but older than the window: the listing
		// has had time to catch up, so it is stale, not ahead.
		3: {Number: 3, State: "open", HeadSHA: "stale", UpdatedAt: now.Add(-30 * time.Minute)},
		// Opened a minute ago and not listed: read on its own, since it
		// may have been closed since (its closed webhook lost).
		4: {Number: 4, State: "open", HeadSHA: "opened", UpdatedAt: now.Add(-time.Minute)},
		// Not listed and older than the window: dropped.
		5: {Number: 5, State: "open", HeadSHA: "old", UpdatedAt: now.Add(-30 * time.Minute)},
	}}
	got := map[int]string{}
	merged, unlisted := rs.mergeSnapshots(listed, now)
	for _, pr := range merged {
		got[pr.Number] = pr.HeadSHA
	}
	assert.Equal(t, map[int]string{1: "pushed", 2: "listed2", 3: "listed3"}, got)
	assert.Equal(t, []int{4}, unlisted, "an unlisted open snapshot is not taken as open")
	assert.NotContains(t, rs.snapshots, 5)
	assert.NotContains(t, rs.snapshots, 2, "the forged snapshot is dropped")
	assert.NotContains(t, rs.snapshots, 3, "the stale snapshot is dropped")
}
