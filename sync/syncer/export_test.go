package syncer

// StateSize is the size of the in-memory maps, for tests.
type StateSize = stateSize

// StateSize exposes stateSize to the tests of package syncer_test.
func (s *Syncer) StateSize() StateSize { return s.stateSize() }
