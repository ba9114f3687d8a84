package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/local/stack"
)

// operatorLease is the operator's leader election lease
// (controllers.DefaultOptions().LeaderElectionID).
const operatorLease = "petri-operator.petri.dev"

// leaseHolder reads who holds a lease; "" when nobody does or it cannot be
// read.
func (r *run) leaseHolder(ctx context.Context, namespace, name string) string {
	var l coordinationv1.Lease
	if err := r.st.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &l); err != nil {
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// runningPods lists the running pods of a Deployment (by its
// app.kubernetes.io/name label) whose container runs.
func (r *run) runningPods(ctx context.Context, namespace, app, container string) []corev1.Pod {
	var pods corev1.PodList
	if err := r.st.Client.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/name": app}); err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.State.Running != nil {
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// waitOperatorLeader waits until an operator process other than the one
// holding the lease as `previous` leads, and returns its identity.
func (r *run) waitOperatorLeader(ctx context.Context, previous string, timeout time.Duration) (string, error) {
	var holder string
	ok := waitFor(ctx, timeout, 100*time.Millisecond, func() bool {
		holder = r.leaseHolder(ctx, stack.ManagementNamespace, operatorLease)
		return holder != "" && holder != previous
	})
	if !ok {
		return "", fmt.Errorf("no new operator leader within %s (lease held by %q)", timeout, holder)
	}
	return holder, nil
}

// waitLiveOperatorLeader waits until a running operator renews the lease
// (every --leader-election-retry-period, 2 s in this suite), so that a kill right after
// leaves the whole lease duration before another process leads.
func (r *run) waitLiveOperatorLeader(ctx context.Context, timeout time.Duration) (string, error) {
	var holder string
	ok := waitFor(ctx, timeout, 100*time.Millisecond, func() bool {
		var renewed time.Time
		holder, renewed = r.leaseState(ctx, stack.ManagementNamespace, operatorLease)
		return holder != "" && time.Since(renewed) < 2500*time.Millisecond
	})
	if !ok {
		return "", fmt.Errorf("no operator renewed its lease within %s", timeout)
	}
	return holder, nil
}

// killOperator SIGKILLs the operator's process; the local node starts it
// again, as a kubelet restarts a killed container.
func (r *run) killOperator(ctx context.Context) error {
	pods := r.runningPods(ctx, stack.ManagementNamespace, "petri-operator", "operator")
	if len(pods) == 0 {
		return fmt.Errorf("no running operator pod")
	}
	return r.st.Node.KillContainer(ctx, stack.ManagementNamespace, pods[0].Name, "operator")
}

// phases tracks which part of its life each environment of a scenario is
// in, so that a fault can say what work it interrupted.
type phases struct {
	mu  sync.Mutex
	now map[string]string
	// hit counts, per phase, the faults that found work in it.
	hit map[string]int
}

func newPhases() *phases { return &phases{now: map[string]string{}, hit: map[string]int{}} }

func (p *phases) set(name, phase string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase == "" {
		delete(p.now, name)
		return
	}
	p.now[name] = phase
}

// fault records a fault against the phases in flight.
func (p *phases) fault() {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]bool{}
	for _, ph := range p.now {
		seen[ph] = true
	}
	for ph := range seen {
		p.hit[ph]++
	}
}

func (p *phases) summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for _, ph := range []string{"deploy", "redeploy", "teardown"} {
		parts = append(parts, fmt.Sprintf("%s %d", ph, p.hit[ph]))
	}
	return strings.Join(parts, ", ")
}

// lifecycle plays one environment's life: create, wait until it converges,
// change its spec, wait again, delete it, wait until it is gone. A step that
// does not converge within the timeout is a violation; the life goes on.
// before, when set, runs before each step with its phase.
func (sc *scene) lifecycle(ctx context.Context, name string, sh shape, ph *phases, timeout time.Duration, before func(phase string)) error {
	step := func(phase string, act func() error, present bool) error {
		if ph != nil {
			ph.set(name, phase)
		}
		if before != nil {
			before(phase)
		}
		if err := act(); err != nil {
			return err
		}
		sc.waitState(ctx, name, phase, present, timeout)
		return nil
	}
	sc.expectPresent(name)
	defer func() {
		if ph != nil {
			ph.set(name, "")
		}
	}()
	if err := step("deploy", func() error { return sc.create(ctx, newEnvironment(name, sc.tag(), sh, 1)) }, true); err != nil {
		return err
	}
	if err := step("redeploy", func() error { return sc.redeploy(ctx, name, 2) }, true); err != nil {
		return err
	}
	sc.expectGone(name)
	return step("teardown", func() error { return sc.remove(ctx, name) }, false)
}

// tag is the scenario's label value.
func (sc *scene) tag() string { return fmt.Sprintf("s%d", sc.row.Number) }

// waitState waits until an environment converged (present) or is gone; a
// timeout is a Converges violation.
func (sc *scene) waitState(ctx context.Context, name, phase string, present bool, timeout time.Duration) {
	if sc.hasFailed(name) {
		timeout = min(timeout, afterFailure)
	}
	var why []string
	ok := waitFor(ctx, timeout, time.Second, func() bool {
		var err error
		if present {
			why, err = sc.converged(ctx, name)
		} else {
			why, err = sc.gone(ctx, name)
		}
		if err != nil {
			why = []string{err.Error()}
		}
		return len(why) == 0
	})
	if ok || ctx.Err() != nil {
		return
	}
	detail := fmt.Sprintf("environment %s did not converge within %s after its %s: %s", name, timeout, phase, strings.Join(why, "; "))
	if e := sc.explain(ctx, name); e != "" {
		detail += " [" + e + "]"
	}
	sc.markFailed(name)
	sc.violate(Converges, fmt.Sprintf("converge/%d/%s/%s", sc.row.Number, name, phase), "%s", detail)
	sc.logf("environment %s did not converge after its %s", name, phase)
}

// playOperatorKills SIGKILLs the operator at random moments while
// environments are deployed, redeployed and torn down. Each kill comes a
// random moment after the restarted operator took the lease again, so that
// every kill lands on an operator at work.
func playOperatorKills(ctx context.Context, sc *scene) error {
	kills := sc.size(50, 2)
	minEnvs := sc.size(20, 3)
	inFlight := sc.size(6, 3)
	timeout := time.Duration(sc.size(600, 300)) * time.Second
	ph := newPhases()

	killCtx, stopKills := context.WithCancel(ctx)
	defer stopKills()
	var killed int
	var killErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		leader, err := sc.waitOperatorLeader(killCtx, "", time.Minute)
		for killed < kills && err == nil {
			sleep(killCtx, sc.between(500*time.Millisecond, 6*time.Second))
			if killCtx.Err() != nil {
				return
			}
			ph.fault()
			if err = sc.killOperator(killCtx); err != nil {
				break
			}
			killed++
			sc.logf("operator SIGKILLed (%d/%d)", killed, kills)
			leader, err = sc.waitOperatorLeader(killCtx, leader, 2*time.Minute)
		}
		if killCtx.Err() == nil {
			killErr = err
		}
	}()

	lifeErr := sc.lives(ctx, "s1-e", minEnvs, 0, inFlight, done, func(name string) error {
		// Stagger the starts, so that lives overlap in every phase.
		sleep(ctx, sc.between(0, 3*time.Second))
		return sc.lifecycle(ctx, name, light, ph, timeout, nil)
	})
	if errors.Is(lifeErr, ctx.Err()) && ctx.Err() != nil {
		return lifeErr
	}
	stopKills()
	<-done
	sc.row.Faults = fmt.Sprintf("%d operator SIGKILLs; kills that found work in flight: %s", killed, ph.summary())
	if killErr != nil {
		return killErr
	}
	return lifeErr
}

// lives runs life for environments named prefix01, prefix02, ..., at most
// inFlight at once, until at least minEnvs have started and done is closed
// (or maxEnvs have started, when maxEnvs > 0), and waits for them all. It
// returns the context's error if it ended first, else a life's error.
func (sc *scene) lives(ctx context.Context, prefix string, minEnvs, maxEnvs, inFlight int, done chan struct{}, life func(name string) error) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, inFlight)
	var lifeErr error
	var errMu sync.Mutex
	for created := 0; created < minEnvs || !isDone(done); {
		if maxEnvs > 0 && created >= maxEnvs {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		created++
		name := fmt.Sprintf("%s%02d", prefix, created)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := life(name); err != nil {
				errMu.Lock()
				lifeErr = err
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lifeErr
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
