// Gate: whether a head commit's artifact gate (a check run or a commit
// status) has passed, remembered once it has.

package syncer

import (
	"context"

	"github.com/petri-dev/petri/sync/provider"
)

// gateOf is the gate of a pull request's head commit. A check run gate
// that names no app never passes for a pull request from a fork: the
// fork's own workflow can post a run of any name. The gate is read on
// forge, the repository's.
func (w *writer) gateOf(ctx context.Context, rs *repoState, forge repoForge, pr provider.PullRequest, gate provider.Gate) (bool, string, error) {
	if pr.Fork && gate.CheckRun != "" && gate.App == "" {
		return false, "a pull request from a fork passes a check run gate only from the app that posts the run: artifactGate.app names none", nil
	}
	return w.gatePassed(ctx, rs, forge, pr.HeadSHA, gate)
}

// gateKeyOf is the key of a gate on a commit: a run of the gate's name
// passes a gate without an app, whichever app posted it.
func gateKeyOf(sha string, gate provider.Gate) gateKey {
	gate.App = ""
	return gateKey{sha, gate.String()}
}

// passes reports whether what passed on a commit passes the gate.
func (p gatePass) passes(gate provider.Gate) bool {
	return len(p) > 0 && (gate.App == "" || p[gate.App])
}

// markPassed remembers that app (or "" for none) passed the gate on a
// commit. The caller holds rs.mu.
func (rs *repoState) markPassed(sha string, gate provider.Gate) {
	k := gateKeyOf(sha, gate)
	if rs.gates[k] == nil {
		rs.gates[k] = gatePass{}
	}
	rs.gates[k][gate.App] = true
}

func (w *writer) gatePassed(ctx context.Context, rs *repoState, forge repoForge, sha string, gate provider.Gate) (bool, string, error) {
	rs.mu.Lock()
	passed := rs.gates[gateKeyOf(sha, gate)].passes(gate)
	rs.mu.Unlock()
	if passed {
		return true, "", nil
	}
	st, reason, err := forge.source.GateState(ctx, forge.path, sha, gate)
	if err != nil {
		return false, "", err
	}
	if st == provider.GatePassed {
		rs.mu.Lock()
		rs.markPassed(sha, gate)
		rs.mu.Unlock()
		return true, "", nil
	}
	return false, reason, nil
}
