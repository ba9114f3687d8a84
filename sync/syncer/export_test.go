package syncer

import "time"

// StateSize is the size of the in-memory maps, for tests.
type StateSize = stateSize

// StateSize exposes stateSize to the tests of package syncer_test.
func (s *Syncer) StateSize() StateSize { return s.stateSize() }

// ListingReuse is how long a listing stands in for the next ones, for
// tests.
func (s *Syncer) ListingReuse() time.Duration { return s.pass.listingReuse() }

// RepositoryObjectName is the name of a repository key's Repository, for
// tests.
var RepositoryObjectName = repositoryObjectName
