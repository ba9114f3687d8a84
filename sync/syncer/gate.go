// Gate: whether a head commit's artifact gate (a check run or a commit
// status) has passed, remembered once it has.

package syncer

import (
	"context"

	"github.com/petri-dev/petri/sync/provider"
)

func (s *Syncer) gatePassed(ctx context.Context, rs *repoState, sha string, gate provider.Gate) (bool, string, error) {
	k := gateKey{sha, gate.String()}
	rs.mu.Lock()
	passed := rs.gates[k]
	rs.mu.Unlock()
	if passed {
		return true, "", nil
	}
	st, reason, err := s.sourceOf(rs.name).GateState(ctx, pathOf(rs.name), sha, gate)
	if err != nil {
		return false, "", err
	}
	if st == provider.GatePassed {
		rs.mu.Lock()
		rs.gates[k] = true
		rs.mu.Unlock()
		return true, "", nil
	}
	return false, reason, nil
}
