package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/stack"
	"github.com/petri-dev/petri/sync/render"
)

// chaosApplication is the application of ConfigRepo.
const chaosApplication = "chaos"

// pullEnvironment finds the environment sync wrote for a pull request; nil
// when there is none.
func (r *run) pullEnvironment(ctx context.Context, number int) *petriv1.EphemeralEnvironment {
	return r.pullEnvironmentOf(ctx, chaosApplication, number)
}

// pullEnvironmentOf finds the environment sync wrote for a pull request of
// an application.
func (r *run) pullEnvironmentOf(ctx context.Context, app string, number int) *petriv1.EphemeralEnvironment {
	var list petriv1.EphemeralEnvironmentList
	if err := retryAPI(ctx, func() error {
		return r.st.Client.List(ctx, &list, client.InNamespace(stack.ManagementNamespace), client.MatchingLabels{
			render.LabelApplication: app, render.LabelPullRequest: strconv.Itoa(number),
		})
	}); err != nil {
		return nil
	}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			return &list.Items[i]
		}
	}
	if len(list.Items) > 0 {
		return &list.Items[0]
	}
	return nil
}

// waitPullEnvironment waits until sync wrote the pull request's environment
// for its head commit.
func (r *run) waitPullEnvironment(ctx context.Context, number int, timeout time.Duration) (string, error) {
	return r.waitForgeEnvironment(ctx, r.githubForge(), number, timeout)
}

// waitForgeEnvironment waits until sync wrote the environment of a pull
// request on a forge for its head commit.
func (r *run) waitForgeEnvironment(ctx context.Context, f *forge, number int, timeout time.Duration) (string, error) {
	head := f.head(number)
	var name string
	ok := waitFor(ctx, timeout, 200*time.Millisecond, func() bool {
		env := r.pullEnvironmentOf(ctx, f.app, number)
		if env == nil || env.Spec.Source == nil || env.Spec.Source.SHA != head {
			return false
		}
		name = env.Name
		return true
	})
	if !ok {
		return "", fmt.Errorf("sync wrote no environment for pull request #%d on %s (head %s) within %s", number, f.name, head, timeout)
	}
	return name, nil
}

// pullRequestPath matches reads of one pull request.
var pullRequestPath = regexp.MustCompile(`^/repos/` + regexp.QuoteMeta(stack.DemoRepository) + `/pulls/\d+$`)

// listingPath is the listing of open pull requests, once per resync round.
const listingPath = "/repos/" + stack.DemoRepository + "/pulls"

// outagePhase is one way GitHub fails.
type outagePhase struct {
	name  string
	fault *githubapi.Fault
	// proxy is the fault of a forge behind a stack.FaultProxy.
	proxy *stack.Fault
}

func outagePhases() []outagePhase {
	return []outagePhase{
		{"500", &githubapi.Fault{Status: http.StatusInternalServerError}, nil},
		{"timeout", &githubapi.Fault{Delay: githubTimeout + 2*time.Second}, nil},
		{"403 with Retry-After", &githubapi.Fault{SecondaryRateLimited: true, RetryAfter: 2 * time.Second}, nil},
		// An empty listing, and every other call failing: the environments
		// of pull requests missing from the listing cannot be confirmed.
		{"truncated listing", &githubapi.Fault{EmptyList: true, Status: http.StatusInternalServerError}, nil},
		// The listing works; reading a pull request that is not in it (the
		// ones closed during the outage) answers 404.
		{"404 for a pull request", &githubapi.Fault{Status: http.StatusNotFound, Match: func(r *http.Request) bool {
			return r.Method == http.MethodGet && pullRequestPath.MatchString(r.URL.Path)
		}}, nil},
	}
}

// counted installs a fault that also counts the pull request listings
// that arrive while it is installed: one per resync round.
func counted(f *githubapi.Fault, n *atomic.Int64) *githubapi.Fault {
	c := *f
	match := f.Match
	c.Match = func(r *http.Request) bool {
		if r.Method == http.MethodGet && r.URL.Path == listingPath {
			n.Add(1)
		}
		return match == nil || match(r)
	}
	return &c
}

// playForgeOutages plays the outage on every forge the stack serves
// (GitHub, and Gitea and GitLab behind their fault proxies), at the same
// time.
func playForgeOutages(ctx context.Context, sc *scene) error {
	forges := sc.forgesUnderTest()
	notes, errs := make([]string, len(forges)), make([]error, len(forges))
	var wg sync.WaitGroup
	for i, f := range forges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			notes[i], errs[i] = sc.playOutage(ctx, f)
		}()
	}
	wg.Wait()
	sc.row.Faults = strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; ")
	return errors.Join(errs...)
}

// playOutage makes a forge's API fail in every way sync must ride out,
// for several resync rounds each, while some pull requests are closed
// without their webhooks reaching sync. No environment may be deleted
// while the forge fails; once it recovers, the closed pull requests'
// environments must go within one resync.
func (sc *scene) playOutage(ctx context.Context, f *forge) (string, error) {
	open := sc.size(8, 3)
	closing := sc.size(4, 1)
	rounds := sc.size(3, 1)
	timeout := stepTimeout

	var numbers []int
	names := map[int]string{}
	for i := 0; i < open; i++ {
		n, err := f.open(ctx, fmt.Sprintf("Chaos change %d", i+1))
		if err != nil {
			return "", fmt.Errorf("%s: %w", f.name, err)
		}
		numbers = append(numbers, n)
	}
	for _, n := range numbers {
		name, err := sc.waitForgeEnvironment(ctx, f, n, timeout)
		if err != nil {
			return "", err
		}
		names[n] = name
		sc.expectPresent(name)
	}
	sc.parallel(mapValues(names), func(name string) { sc.waitState(ctx, name, "deploy", true, timeout) })

	phases := f.phases
	faultStart := time.Now()
	var ignored atomic.Int64
	f.setFault(&phases[0], &ignored)
	// Closed while the forge fails and their webhooks lost: only a resync
	// can tell.
	closed := numbers[:closing]
	for _, n := range closed {
		if err := f.closeQuietly(ctx, sc.st, n); err != nil {
			f.setFault(nil, nil)
			return "", fmt.Errorf("%s: close #%d: %w", f.name, n, err)
		}
	}
	var roundNotes []string
	total := 0
	for i := range phases {
		var n atomic.Int64
		f.setFault(&phases[i], &n)
		ok := waitFor(ctx, 3*time.Minute, 50*time.Millisecond, func() bool { return n.Load() >= int64(rounds) })
		got := int(n.Load())
		total += got
		roundNotes = append(roundNotes, fmt.Sprintf("%s ×%d", phases[i].name, got))
		sc.logf("%s failing with %s: %d resync rounds", f.name, phases[i].name, got)
		if !ok {
			f.setFault(nil, nil)
			return "", fmt.Errorf("sync listed pull requests %d times in 3 minutes while %s failed with %s, want %d", got, f.name, phases[i].name, rounds)
		}
	}
	recovered := time.Now()
	f.setFault(nil, nil)
	sc.logf("%s recovered after %d failing resync rounds", f.name, total)
	slowest := sc.checkOutage(ctx, f, names, closed, faultStart, recovered)
	// The rest is still there and still right; then their pull requests
	// close the ordinary way.
	for _, n := range numbers[closing:] {
		sc.waitState(ctx, names[n], "outage", true, timeout)
	}
	for _, n := range numbers[closing:] {
		sc.expectGone(names[n])
		if err := f.close(ctx, n); err != nil {
			return "", fmt.Errorf("%s: close #%d: %w", f.name, n, err)
		}
	}
	return fmt.Sprintf("%s: %d resync rounds failing (%s), %d of %d pull requests closed during the outage, cleaned up at most %s after recovery",
		f.name, total, strings.Join(roundNotes, ", "), len(closed), open, slowest.Round(100*time.Millisecond)), nil
}

// checkOutage checks that nothing was deleted while the forge failed and
// that the pull requests closed meanwhile lost their environments within
// one resync of its recovery; it returns the slowest cleanup.
func (sc *scene) checkOutage(ctx context.Context, f *forge, names map[int]string, closed []int, faultStart, recovered time.Time) time.Duration {
	for n, name := range names {
		rec := sc.rec.environment(name)
		if rec != nil && !rec.deleting.IsZero() && rec.deleting.Before(recovered) && !rec.deleting.Before(faultStart) {
			sc.violate(ScenarioChecks, "outage-delete/"+name, "environment %s (pull request #%d on %s) was deleted at %s while %s was failing", name, n, f.name, clock(rec.deleting), f.name)
		}
	}
	bound := resyncInterval + 10*time.Second
	var slowest time.Duration
	for _, n := range closed {
		name := names[n]
		sc.expectGone(name)
		var rec *envRecord
		waitFor(ctx, bound+time.Minute, 100*time.Millisecond, func() bool {
			rec = sc.rec.environment(name)
			return rec != nil && !rec.deleting.IsZero()
		})
		if rec == nil || rec.deleting.IsZero() {
			sc.violate(ScenarioChecks, "outage-cleanup/"+name, "environment %s of pull request #%d on %s, closed during the outage, was not deleted within %s of its recovery", name, n, f.name, bound+time.Minute)
			continue
		}
		took := rec.deleting.Sub(recovered)
		slowest = max(slowest, took)
		if took > bound {
			sc.violate(ScenarioChecks, "outage-cleanup/"+name, "environment %s of pull request #%d on %s, closed during the outage, was deleted %s after it recovered: more than one resync (%s) and 10 s to act", name, n, f.name, took.Round(100*time.Millisecond), resyncInterval)
		}
	}
	return slowest
}

func mapValues(m map[int]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// playSyncLeaderKill kills the sync replica that leads while pull request
// webhooks arrive: pull requests are opened, pushed to and closed (each
// with its signed webhook, to either replica through the Service) while the
// leader is SIGKILLed: every other time its whole pod, so that the other
// replica must take over, else its process, which the pod starts again. The
// lease must be renewed by a live process within 30 s of each kill; afterwards every pull request must have the environment of
// its head commit, or none once closed, and no pull request may carry a
// second comment from sync. It needs sync running as two replicas with
// leader election; until the installation does, it does not run.
func playSyncLeaderKill(ctx context.Context, sc *scene) error {
	replicas, lease, err := sc.syncElection(ctx)
	if err != nil {
		return err
	}
	if replicas < 2 || lease == "" {
		return &notRunError{reason: fmt.Sprintf("sync has no leader election yet (config/sync runs %d replica(s) and holds no lease in %s)", replicas, stack.SyncNamespace)}
	}
	kills := sc.size(5, 1)
	events := sc.size(60, 10)
	maxOpen := sc.size(10, 4)
	timeout := stepTimeout

	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	t := sc.startTraffic(trafficCtx, events, maxOpen)
	killed, podKills, worst, err := sc.killSyncLeaders(ctx, lease, kills)
	if err != nil {
		return err
	}
	t.killsDone.Store(true)
	<-t.done

	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.open {
		name, err := sc.waitPullEnvironment(ctx, n, timeout)
		if err != nil {
			sc.violate(ScenarioChecks, fmt.Sprintf("lost/%d", n), "pull request #%d: %v (an event lost with the leader)", n, err)
			continue
		}
		sc.expectPresent(name)
	}
	for _, n := range t.closed {
		if name := sc.pullRecord(n); name != "" {
			sc.expectGone(name)
		}
	}
	for _, n := range append(append([]int{}, t.open...), t.closed...) {
		if c := len(sc.st.GitHub.Comments(stack.DemoRepository, n)); c > 1 {
			sc.violate(ScenarioChecks, fmt.Sprintf("comments/%d", n), "pull request #%d has %d comments from sync, want one updated in place", n, c)
		}
	}
	sc.row.Faults = fmt.Sprintf("%d sync leaders SIGKILLed (%d whole pods, %d processes) during %d webhook deliveries (%d refused); the lease was renewed at most %s after a kill",
		killed, podKills, killed-podKills, t.delivered+t.refused, t.refused, worst.Round(100*time.Millisecond))
	if killed < kills {
		return fmt.Errorf("only %d of %d sync leaders could be killed", killed, kills)
	}
	// Close what is still open, the ordinary way.
	for _, n := range t.open {
		if name := sc.pullRecord(n); name != "" {
			sc.expectGone(name)
		}
		if _, err := sc.st.ClosePullRequest(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// prTraffic is pull requests opened, pushed to and closed, each with its
// webhook, while sync leaders are killed.
type prTraffic struct {
	mu           sync.Mutex
	open, closed []int
	delivered    int
	refused      int
	killsDone    atomic.Bool
	done         chan struct{}
}

// startTraffic sends webhooks until every kill is done (killsDone): at
// least events of them, at most four times as many, with at most maxOpen
// pull requests open.
func (sc *scene) startTraffic(trafficCtx context.Context, events, maxOpen int) *prTraffic {
	t := &prTraffic{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		for i := 0; (i < events || !t.killsDone.Load()) && i < 4*events && trafficCtx.Err() == nil; i++ {
			var err error
			t.mu.Lock()
			switch {
			case len(t.open) < 2 || len(t.open) < maxOpen && i%3 == 0:
				t.mu.Unlock()
				var pr githubapi.PullRequest
				pr, err = sc.st.OpenPullRequest(trafficCtx, 0, fmt.Sprintf("Leader change %d", i))
				t.mu.Lock()
				if pr.Number != 0 {
					t.open = append(t.open, pr.Number)
				}
			case i%3 != 2:
				n := t.open[sc.intn(len(t.open))]
				t.mu.Unlock()
				_, err = sc.st.PushCommit(trafficCtx, n)
				t.mu.Lock()
			default:
				k := sc.intn(len(t.open))
				n := t.open[k]
				t.open = append(t.open[:k], t.open[k+1:]...)
				t.closed = append(t.closed, n)
				t.mu.Unlock()
				_, err = sc.st.ClosePullRequest(trafficCtx, n)
				t.mu.Lock()
			}
			// A refused delivery is lost to sync as a lost webhook is: the
			// resync must make up for it.
			if err != nil {
				t.refused++
			} else {
				t.delivered++
			}
			t.mu.Unlock()
			sleep(trafficCtx, sc.between(300*time.Millisecond, time.Second))
		}
	}()
	return t
}

// killSyncLeaders SIGKILLs the sync leader kills times, every other time
// its whole pod, else its process, and checks that a live process renews
// the lease within 30 s of each kill; worst is the longest wait.
func (sc *scene) killSyncLeaders(ctx context.Context, lease string, kills int) (killed, podKills int, worst time.Duration, err error) {
	for killed < kills && ctx.Err() == nil {
		sleep(ctx, sc.between(time.Second, 4*time.Second))
		holder, _ := sc.leaseState(ctx, stack.SyncNamespace, lease)
		var victim string
		for _, p := range sc.runningPods(ctx, stack.SyncNamespace, "petri-sync", "sync") {
			if p.Name == holder {
				victim = p.Name
			}
		}
		if victim == "" {
			continue
		}
		// Every other kill ends the whole pod (the other replica must take
		// the lease when it expires, while the Deployment replaces the pod);
		// the rest kill the process, which its pod starts again.
		killedAt := time.Now()
		how := "pod"
		if killed%2 == 0 {
			err = sc.st.Node.Kill(stack.SyncNamespace, victim)
			podKills++
		} else {
			how = "process"
			err = sc.st.Node.KillContainer(ctx, stack.SyncNamespace, victim, "sync")
		}
		if err != nil {
			return killed, podKills, worst, err
		}
		killed++
		var next string
		ok := waitFor(ctx, time.Minute, 100*time.Millisecond, func() bool {
			var renewed time.Time
			next, renewed = sc.leaseState(ctx, stack.SyncNamespace, lease)
			return next != "" && renewed.After(killedAt.Add(100*time.Millisecond))
		})
		took := time.Since(killedAt)
		worst = max(worst, took)
		switch {
		case !ok:
			sc.violate(ScenarioChecks, fmt.Sprintf("takeover/%d", killed), "no sync replica renewed the lease within a minute of the leader %s being killed", victim)
		case took > 30*time.Second:
			sc.violate(ScenarioChecks, fmt.Sprintf("takeover/%d", killed), "the sync lease was renewed %s after the leader %s was killed, more than 30 s", took.Round(time.Second), victim)
		}
		sc.logf("sync leader %s SIGKILLed (its %s); %s leads %s later", victim, how, next, took.Round(100*time.Millisecond))
	}
	return killed, podKills, worst, nil
}

// leaseState reads who holds a lease and when it was last renewed.
func (r *run) leaseState(ctx context.Context, namespace, name string) (string, time.Time) {
	var l coordinationv1.Lease
	if err := r.st.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &l); err != nil {
		return "", time.Time{}
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	var renewed time.Time
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	}
	return holder, renewed
}

// pullRecord names the environment the recorder saw for a pull request,
// if any.
func (r *run) pullRecord(number int) string {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	for _, e := range r.rec.envs {
		if e.labels[render.LabelApplication] == chaosApplication && e.labels[render.LabelPullRequest] == strconv.Itoa(number) {
			return e.name
		}
	}
	return ""
}
