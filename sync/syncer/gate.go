// Gate: whether a head commit's artifact gate (a check run or a commit
// status) has passed, remembered once it has.

package syncer

import (
	"context"

	"github.com/petri-dev/petri/sync/provider"
)

func (s *Syncer) gatePassed(ctx context.Context, repo, sha string, gate provider.Gate) (bool, string, error) {
	k := gateKey{repo, sha, gate.String()}
	s.mu.Lock()
	passed := s.gates[k]
	s.mu.Unlock()
	if passed {
		return true, "", nil
	}
	st, reason, err := s.source.GateState(ctx, repo, sha, gate)
	if err != nil {
		return false, "", err
	}
	if st == provider.GatePassed {
		s.mu.Lock()
		s.gates[k] = true
		s.mu.Unlock()
		return true, "", nil
	}
	return false, reason, nil
}
