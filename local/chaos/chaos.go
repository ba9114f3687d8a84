// Package chaos injects faults into Petri running on the local control
// plane (package local/stack: the operator and sync installed from config/,
// the local node, the GitHub stand-in) and checks, after every scenario, the
// invariants a production operator must keep whatever fails:
//
//  1. the operator SIGKILLed at random moments during deploy, redeploy and
//     teardown;
//  2. deployer pods killed in the middle of a Helm operation;
//  3. kube-apiserver restarted (same etcd) during deploy, redeploy and
//     teardown;
//  4. workload namespaces, Helm releases, Jobs and RoleBindings deleted
//     behind Petri's back;
//  5. the GitHub API failing for many resync rounds (500s, timeouts, 403 with
//     Retry-After, truncated listings, 404 for a pull request);
//  6. namespace squatting and tampered ownership marks;
//  7. the sync leader killed while webhooks arrive (sync running two
//     replicas under leader election; without it the scenario does not
//     run).
//
// Every scenario has a full size (make chaos, cmd/petri-chaos) and a short
// one (tests/chaos, in make test). Run returns one Row per scenario with the
// violations of each Invariant; WriteTable and WriteDoc print them.
//
// The suite judges Petri only by what the API server, Helm's storage and the
// GitHub stand-in show; it never reads the operator's or sync's memory. It
// writes EphemeralEnvironments itself, as any client would, and through sync
// (pull requests on the GitHub stand-in) where sync is under test.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/petri-dev/petri/local/stack"
)

// Size is how hard each scenario pushes.
type Size string

// Sizes.
const (
	// Full is make chaos: the numbers issue 12 asks for (at least 50
	// operator kills over 20 environments, 20 deployer kills, 12 failing
	// resync rounds, ...).
	Full Size = "full"
	// Short is the version make test runs: every scenario, a few faults
	// each, in a few minutes.
	Short Size = "short"
)

// ParseSize reads "full" or "short".
func ParseSize(s string) (Size, error) {
	switch Size(s) {
	case Full, Short:
		return Size(s), nil
	}
	return "", fmt.Errorf("size %q: want full or short", s)
}

// Options configure a run.
type Options struct {
	// Size is Full or Short.
	Size Size
	// Seed makes the random moments and choices repeatable (as far as the
	// machine's timing allows).
	Seed int64
	// Log receives progress, one line per event; nil discards it.
	Log io.Writer
	// Scenarios selects scenarios by number (1-7); all when empty.
	Scenarios []int
}

// Row is one scenario's outcome.
type Row struct {
	// Number and Name identify the scenario.
	Number int
	Name   string
	// Faults says what was injected, with counts.
	Faults string
	// Environments counts the environments the scenario made.
	Environments int
	// Violations lists the breaches, per invariant.
	Violations map[Invariant][]Violation
	// NotRun, when set, says why the scenario did not run.
	NotRun string
	// Err is a failure of the suite itself (not of Petri): the scenario
	// could not be carried out.
	Err error
	// Duration is how long the scenario took, checks included.
	Duration time.Duration
}

// Count is the number of violations of one invariant.
func (r *Row) Count(i Invariant) int { return len(r.Violations[i]) }

// Total is the number of violations of every invariant.
func (r *Row) Total() int {
	n := 0
	for _, vs := range r.Violations {
		n += len(vs)
	}
	return n
}

// Result is a run's outcome.
type Result struct {
	Size     Size
	Seed     int64
	Started  time.Time
	Duration time.Duration
	// Machine describes where it ran: processors and memory.
	Machine string
	// Settings lists the installation's settings the suite changed.
	Settings []string
	Rows     []Row
}

// Violations is the total over every scenario.
func (res *Result) Violations() int {
	n := 0
	for i := range res.Rows {
		n += res.Rows[i].Total()
	}
	return n
}

// Failed reports whether any scenario broke an invariant or could not be
// carried out.
func (res *Result) Failed() bool {
	for i := range res.Rows {
		if res.Rows[i].Total() > 0 || res.Rows[i].Err != nil {
			return true
		}
	}
	return false
}

// SyncFlags are the settings of petri-sync the suite runs with: a short
// resync, so that many resync rounds fit into a scenario, and a short
// GitHub timeout, so that a timing-out GitHub costs seconds per round.
var SyncFlags = []string{"-resync-interval=" + resyncInterval.String(), "-github-timeout=" + githubTimeout.String()}

// OperatorFlags are the settings of petri-operator the suite runs with: a
// short release verification period, so that a release deleted behind
// Petri's back is found within a scenario (the default is ten minutes).
var OperatorFlags = []string{"--verify-interval=30s"}

const (
	resyncInterval = 5 * time.Second
	githubTimeout  = 2 * time.Second
)

// run is one run of the suite.
type run struct {
	st   *stack.Stack
	opts Options
	rec  *recorder

	rngMu sync.Mutex
	rng   *rand.Rand

	logMu sync.Mutex
	start time.Time

	// reported holds the keys of violations already attributed.
	reported map[string]bool
	// owner maps environment names to the scenario that made them.
	ownerMu sync.Mutex
	owner   map[string]int
}

// Run plays the scenarios against a started stack, one after another, and
// checks the invariants after each. The stack must have been started with
// ConfigRepo's configuration repository. The error is for a run that could
// not start; a scenario the suite could not carry out is a Row with Err.
func Run(ctx context.Context, st *stack.Stack, opts Options) (*Result, error) {
	if opts.Size == "" {
		opts.Size = Short
	}
	r := &run{st: st, opts: opts, rng: rand.New(rand.NewSource(opts.Seed)), start: time.Now(), reported: map[string]bool{}, owner: map[string]int{}}
	res := &Result{Size: opts.Size, Seed: opts.Seed, Started: r.start, Machine: machine()}
	r.logf("chaos: %s size, seed %d, on %s", opts.Size, opts.Seed, res.Machine)

	if err := st.SetSyncFlags(ctx, SyncFlags...); err != nil {
		return nil, err
	}
	res.Settings = append(res.Settings, "petri-sync "+strings.Join(SyncFlags, " "))
	if err := st.SetOperatorFlags(ctx, OperatorFlags...); err != nil {
		return nil, err
	}
	res.Settings = append(res.Settings, "petri-operator "+strings.Join(OperatorFlags, " "))
	r.rec = newRecorder(func(n int) bool {
		pr, ok := st.PullRequest(n)
		if !ok {
			pr = st.GitHub.PullRequest(stack.DemoRepository, n)
		}
		return pr.State == "closed"
	})
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := r.rec.start(watchCtx, st.Cluster.Config, stack.ManagementNamespace); err != nil {
		return nil, err
	}

	for _, group := range r.groups() {
		if ctx.Err() != nil {
			break
		}
		res.Rows = append(res.Rows, r.playGroup(ctx, group)...)
	}
	sort.Slice(res.Rows, func(i, j int) bool { return res.Rows[i].Number < res.Rows[j].Number })
	res.Duration = time.Since(r.start)
	return res, nil
}

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
	{5, "GitHub API failing", playGitHubOutage, true},
	{6, "namespace squatting and tampered ownership", playSquatting, true},
	{7, "sync leader killed while webhooks arrive", playSyncLeaderKill, false},
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
func (sc *scene) expectGone(name string)    { sc.setExpect(name, false) }

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

// checkOrphans waits until no namespace outlives its environment.
func (r *run) checkOrphans(ctx context.Context, timeout time.Duration) []Violation {
	deadline := time.Now().Add(timeout)
	var left map[string]orphan
	for {
		left = r.rec.orphanCandidates()
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

// logf prints one line of progress with the time since the run began.
func (r *run) logf(format string, args ...any) {
	if r.opts.Log == nil {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintf(r.opts.Log, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// intn and duration draw from the run's seeded source.
func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Intn(n)
}

func (r *run) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return lo + time.Duration(r.rng.Int63n(int64(hi-lo)))
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitFor polls cond every interval until it is true or timeout passes.
func waitFor(ctx context.Context, timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, interval)
	}
}

// machine describes the processors and memory of this machine.
func machine() string {
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb); err == nil {
					mem = fmt.Sprintf(", %.1f GiB memory", float64(kb)/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d processors (nproc)%s, %s/%s", runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH)
}

// ConfigRepo writes the configuration repository the suite's stack runs
// with into dir (pass it as stack.Options.ConfigSource): one application on
// the demo repository whose pull requests labelled "preview" get an
// environment of one light component, its values carrying the head commit.
func ConfigRepo(dir string) error {
	app := fmt.Sprintf(`# Environments for the fault-injection suite (local/chaos): every open pull
# request of %[1]s labelled %[2]q gets one light component (the greeter
# chart with no replicas), its values carrying the pull request's head commit.
apiVersion: petri.dev/v1alpha1
kind: Application
name: chaos
repository: %[1]s
trigger:
  labels: [%[2]s]
components:
  - name: app
    chart:
      repository: %[3]s
      name: greeter
      version: 0.1.0
    values:
      replicas: 0
    pullRequestValues:
      message: "pull request #{{ .Number }}"
      commit: "{{ .SHA }}"
maxEnvironments: 100
url: "http://%[4]s/{{ .Environment }}/"
`, stack.DemoRepository, stack.DemoLabel, stack.DeployerCharts, stack.DefaultIngressAddress)
	if err := os.MkdirAll(filepath.Join(dir, "applications"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "applications", "chaos.yaml"), []byte(app), 0o644)
}
