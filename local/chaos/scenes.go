package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// groups orders the selected scenarios into groups played one after
// another. At full size every scenario plays alone, so that each row of
// the table shows the effect of its own faults. The short version, to fit
// into make test, plays together the scenarios that can share the machine
// (their own checks do not depend on quiet around them: operator kills,
// deployer kills, deletions behind Petri's back, GitHub failing,
// squatting), where the first of them comes; violations still go to the
// scenario whose environment they concern. The API server restarts and the
// sync leader kills, which would upset the others' timing checks, play
// alone.
func (r *run) groups() [][]scenario {
	var selected []scenario
	for _, sc := range scenarios {
		if len(r.opts.Scenarios) == 0 || containsInt(r.opts.Scenarios, sc.number) {
			selected = append(selected, sc)
		}
	}
	var out [][]scenario
	together := -1
	for _, sc := range selected {
		switch {
		case r.opts.Size != Short || !sc.shares:
			out = append(out, []scenario{sc})
		case together < 0:
			together = len(out)
			out = append(out, []scenario{sc})
		default:
			out[together] = append(out[together], sc)
		}
	}
	return out
}

// scenario is one kind of fault.
type scenario struct {
	number int
	name   string
	play   func(ctx context.Context, sc *scene) error
	// shares is true when the scenario can play at the same time as
	// others in the short version.
	shares bool
}

// scenarios are played in this order.
var scenarios = []scenario{
	{1, "operator SIGKILLed at random moments", playOperatorKills, true},
	{2, "deployer pods killed mid-Helm", playDeployerKills, true},
	{3, "kube-apiserver restarted", playAPIServerRestarts, false},
	{4, "workload objects deleted behind Petri's back", playDeletedBehind, true},
	{5, "forge API failing", playForgeOutages, true},
	{6, "namespace squatting and tampered ownership", playSquatting, true},
	{7, "sync leader killed while webhooks arrive", playSyncLeaderKill, false},
	// Its checks wait for sync's answers, which GitHub failing (5) would
	// hold up: it plays alone.
	{8, "hostile author", playHostileAuthor, false},
	// Its checks time the operator's answers to a cluster going away, and
	// a cut of a kube-apiserver holds up every client of it: it plays
	// alone.
	{9, "workload cluster unreachable or its credentials revoked", playClusterFaults, false},
	// It saturates kube-apiserver, which would upset every other
	// scenario's timing: it plays alone.
	{10, "kube-apiserver saturated", playSaturation, false},
}

// scene is one scenario being played.
type scene struct {
	*run
	row *Row
	// expect is each environment's final state: true present, false gone.
	expect map[string]bool
	mu     sync.Mutex
	// checks are the scenario's own breaches.
	checks []Violation
	// failed are the environments that already missed a state: later waits
	// for them are short, so one broken environment does not stall the run.
	failed map[string]bool
}

func (sc *scene) full() bool { return sc.opts.Size == Full }

// size picks the full or the short number.
func (sc *scene) size(full, short int) int {
	if sc.full() {
		return full
	}
	return short
}

// expectPresent and expectGone set an environment's final state.
func (sc *scene) expectPresent(name string) { sc.setExpect(name, true) }

func (sc *scene) expectGone(name string) { sc.setExpect(name, false) }

func (sc *scene) setExpect(name string, present bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, ok := sc.expect[name]; !ok {
		sc.row.Environments++
	}
	sc.expect[name] = present
	sc.ownerMu.Lock()
	sc.owner[name] = sc.row.Number
	sc.ownerMu.Unlock()
}

// markFailed records that an environment missed a state; hasFailed asks.
func (sc *scene) markFailed(name string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.failed[name] = true
}

func (sc *scene) hasFailed(name string) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.failed[name]
}

// afterFailure is how long to wait for an environment that already missed
// a state.
const afterFailure = 45 * time.Second

// violate records one of the scenario's own breaches.
func (sc *scene) violate(inv Invariant, key, format string, args ...any) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.checks = append(sc.checks, Violation{Invariant: inv, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// playGroup plays scenarios at the same time, then checks the invariants
// and gives each violation to the scenario whose environment it concerns.
func (r *run) playGroup(ctx context.Context, group []scenario) []Row {
	scenes := make([]*scene, len(group))
	start := time.Now()
	var wg sync.WaitGroup
	for i, s := range group {
		row := &Row{Number: s.number, Name: s.name, Violations: map[Invariant][]Violation{}}
		sc := &scene{run: r, row: row, expect: map[string]bool{}, failed: map[string]bool{}}
		scenes[i] = sc
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.logf("scenario %d: %s", s.number, s.name)
			err := s.play(ctx, sc)
			var notRun *notRunError
			switch {
			case errors.As(err, &notRun):
				row.NotRun = notRun.reason
				r.logf("scenario %d not run: %s", s.number, notRun.reason)
			case err != nil:
				row.Err = err
				r.logf("scenario %d could not be carried out: %v", s.number, err)
			}
		}()
	}
	wg.Wait()

	var names []string
	for _, s := range group {
		names = append(names, fmt.Sprint(s.number))
	}
	r.logf("scenario %s: checking the invariants", strings.Join(names, ", "))
	found := make([][]Violation, len(scenes))
	for i, sc := range scenes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i] = append(sc.checkConvergence(ctx), sc.checks...)
		}()
	}
	wg.Wait()
	var global []Violation
	global = append(global, r.checkOrphans(ctx, time.Duration(scenes[0].size(120, 60))*time.Second)...)
	global = append(global, r.rec.helmOverlaps(time.Now())...)
	global = append(global, r.rec.duplicateJobs()...)
	global = append(global, r.rec.targetMoves()...)
	global = append(global, r.rec.drainLive()...)
	for _, v := range global {
		i := 0
		r.ownerMu.Lock()
		n, ok := r.owner[v.Env]
		r.ownerMu.Unlock()
		for j, s := range group {
			if ok && s.number == n {
				i = j
			}
		}
		found[i] = append(found[i], v)
	}

	rows := make([]Row, len(scenes))
	for i, sc := range scenes {
		row := sc.row
		for _, v := range found[i] {
			if r.reported[v.Key] {
				continue
			}
			r.reported[v.Key] = true
			row.Violations[v.Invariant] = append(row.Violations[v.Invariant], v)
			r.logf("VIOLATION (scenario %d, %s): %s", row.Number, v.Invariant.Column(), v.Detail)
		}
		row.Duration = time.Since(start)
		if row.NotRun == "" {
			r.logf("scenario %d done in %s: %s; %d environments; %d violations", row.Number, row.Duration.Round(time.Second), row.Faults, row.Environments, row.Total())
		}
		rows[i] = *row
	}
	return rows
}

// notRunError says why a scenario cannot run on this installation.
type notRunError struct{ reason string }

func (e *notRunError) Error() string { return "not run: " + e.reason }

// NumScenarios is the number of the last scenario: they are numbered from 1.
func NumScenarios() int { return scenarios[len(scenarios)-1].number }
