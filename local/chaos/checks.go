package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// stepTimeout bounds the wait for an environment to reach the state of one
// step of its life. It is generous: a loaded machine must not pass for a
// broken Petri, and only a broken Petri waits that long.
const stepTimeout = 4 * time.Minute

// convergeTimeout bounds the wait for the final state after a scenario.
func (sc *scene) convergeTimeout() time.Duration {
	return time.Duration(sc.size(240, 180)) * time.Second
}

// checkConvergence waits until every environment is in its expected final
// state, and reports each one that is not when the time is up.
func (sc *scene) checkConvergence(ctx context.Context) []Violation {
	names := make([]string, 0, len(sc.expect))
	for n := range sc.expect {
		names = append(names, n)
	}
	sort.Strings(names)
	var problems map[string][]string
	deadline := time.Now().Add(sc.convergeTimeout())
	allFailed := len(names) > 0
	for _, n := range names {
		allFailed = allFailed && sc.hasFailed(n)
	}
	if allFailed {
		deadline = time.Now().Add(afterFailure)
	}
	for {
		problems = map[string][]string{}
		for _, n := range names {
			var why []string
			var err error
			if sc.expect[n] {
				why, err = sc.converged(ctx, n)
			} else {
				why, err = sc.gone(ctx, n)
			}
			if err != nil {
				why = []string{err.Error()}
			}
			if len(why) > 0 {
				problems[n] = why
			}
		}
		if len(problems) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, time.Second)
	}
	var out []Violation
	for _, n := range names {
		why, ok := problems[n]
		if !ok {
			continue
		}
		state := "had not converged to its spec"
		if !sc.expect[n] {
			state = "was not gone"
		}
		detail := fmt.Sprintf("environment %s %s at the end of scenario %d: %s", n, state, sc.row.Number, strings.Join(why, "; "))
		if e := sc.explain(ctx, n); e != "" {
			detail += " [" + e + "]"
		}
		out = append(out, Violation{Invariant: Converges, Key: fmt.Sprintf("converge/%d/%s", sc.row.Number, n), Env: n, Detail: detail})
	}
	return out
}

// checkOrphans waits until no namespace outlives its environment, in the
// management cluster and in every workload cluster.
func (r *run) checkOrphans(ctx context.Context, timeout time.Duration) []Violation {
	deadline := time.Now().Add(timeout)
	var left map[string]orphan
	for {
		left = r.rec.orphanCandidates()
		for name, o := range r.workloadOrphans(ctx) {
			left[name] = o
		}
		if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, time.Second)
	}
	var out []Violation
	for name, o := range left {
		out = append(out, Violation{Invariant: NoOrphanNamespace, Key: "orphan/" + name, Env: o.env, Detail: o.why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
