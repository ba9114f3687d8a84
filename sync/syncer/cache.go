package syncer

import "sigs.k8s.io/controller-runtime/pkg/cache"

// Cache is sync's informer cache: the EphemeralEnvironments and
// SharedWorkloads sync wrote in the management namespace. The web page
// (sync/ui) reads and watches it rather than opening watches of its own;
// Start starts it.
func (s *Syncer) Cache() cache.Cache { return s.cache }
