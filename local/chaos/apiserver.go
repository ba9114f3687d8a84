package chaos

import (
	"context"
	"fmt"
	"time"
)

// playAPIServerRestarts restarts kube-apiserver (killed, down for a few
// seconds, started again on the same etcd) while environments are deployed,
// redeployed and torn down: at full size once in each phase, per round; in
// the short version once, during the redeploy (running Jobs of the old
// generation, a new graph to start).
func playAPIServerRestarts(ctx context.Context, sc *scene) error {
	rounds := sc.size(2, 1)
	perRound := sc.size(4, 2)
	timeout := stepTimeout
	restarts := 0
	var down time.Duration
	ph := newPhases()
	for round := 1; round <= rounds; round++ {
		names := make([]string, perRound)
		for i := range names {
			names[i] = fmt.Sprintf("s3-r%d-e%02d", round, i+1)
		}
		// Each phase starts on every environment at once; the API server
		// goes down a random moment later, while the operator and the
		// deployer Jobs are at work.
		for _, phase := range []string{"deploy", "redeploy", "teardown"} {
			errs := make(chan error, len(names))
			for _, n := range names {
				ph.set(n, phase)
				switch phase {
				case "deploy":
					sc.expectPresent(n)
					errs <- sc.create(ctx, newEnvironment(n, sc.tag(), light, 1))
				case "redeploy":
					errs <- sc.redeploy(ctx, n, 2)
				case "teardown":
					sc.expectGone(n)
					errs <- sc.remove(ctx, n)
				}
			}
			close(errs)
			for err := range errs {
				if err != nil {
					return err
				}
			}
			if !sc.full() && phase != "redeploy" {
				sc.parallel(names, func(n string) { sc.waitState(ctx, n, phase, phase != "teardown", timeout) })
				continue
			}
			sleep(ctx, sc.between(300*time.Millisecond, 2500*time.Millisecond))
			d := sc.between(time.Second, 4*time.Second)
			ph.fault()
			sc.logf("kube-apiserver restarting (down %s) during %s", d.Round(100*time.Millisecond), phase)
			if err := sc.st.Cluster.RestartAPIServer(ctx, d); err != nil {
				return err
			}
			restarts++
			down += d
			sc.parallel(names, func(n string) { sc.waitState(ctx, n, phase, phase != "teardown", timeout) })
		}
		for _, n := range names {
			ph.set(n, "")
		}
	}
	sc.row.Faults = fmt.Sprintf("%d kube-apiserver restarts (SIGKILL, down %s in all; restarts that found work in flight: %s)", restarts, down.Round(100*time.Millisecond), ph.summary())
	return nil
}
