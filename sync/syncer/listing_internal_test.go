package syncer

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/petri-dev/petri/sync/provider"
)

// A kept listing stands in for a new one only for a pass answering
// pull-request webhooks about pull requests it has (or closed ones), while
// it is young enough, with no resync due and no hand-over.
func TestKeptListingStandsInOnlyForWebhooksOfListedPullRequests(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	listedAt := now.Add(-time.Minute)
	one := provider.PullRequest{Number: 1, State: "open", HeadSHA: "a", UpdatedAt: listedAt}
	state := func(snaps ...provider.PullRequest) *repoState {
		rs := newRepoState("acme/shop", new(sync.Mutex))
		rs.listing = &keptListing{at: listedAt, prs: map[int]provider.PullRequest{1: one}}
		for _, s := range snaps {
			rs.snapshots[s.Number] = s
			rs.sinceListing[s.Number] = true
		}
		return rs
	}
	pushed := one
	pushed.HeadSHA, pushed.UpdatedAt = "b", now
	rs := state(pushed)
	got, ok := rs.reuseListing(now, 5*time.Minute, false)
	assert.True(t, ok, "a push of a listed pull request")
	assert.Equal(t, []provider.PullRequest{one}, got, "the listing as it was: the snapshot is merged over it by the pass")
	assert.Empty(t, rs.sinceListing)
	_, ok = rs.reuseListing(now, 5*time.Minute, false)
	assert.False(t, ok, "no webhook since")

	closed := provider.PullRequest{Number: 2, State: "closed", UpdatedAt: now}
	_, ok = state(closed).reuseListing(now, 5*time.Minute, false)
	assert.True(t, ok, "a close of a pull request the listing does not have")

	opened := provider.PullRequest{Number: 3, State: "open", UpdatedAt: now}
	_, ok = state(pushed, opened).reuseListing(now, 5*time.Minute, false)
	assert.False(t, ok, "an opened pull request the listing does not have: a listing shows every one opened since")

	tie := pushed
	tie.UpdatedAt = listedAt
	_, ok = state(tie).reuseListing(now, 5*time.Minute, false)
	assert.False(t, ok, "a snapshot dated as the listing and different: only a listing says which is newer")
	same := one
	_, ok = state(same).reuseListing(now, 5*time.Minute, false)
	assert.True(t, ok, "a snapshot the listing shows")

	_, ok = state(pushed).reuseListing(now, time.Minute, false)
	assert.False(t, ok, "too old")
	_, ok = state(pushed).reuseListing(now, 5*time.Minute, true)
	assert.False(t, ok, "the pass answers a resync or a hand-over that named a pull request")
	none := state(pushed)
	none.listing = nil
	_, ok = none.reuseListing(now, 5*time.Minute, false)
	assert.False(t, ok, "nothing kept")
}
