package syncer_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/metrics"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
	"github.com/petri-dev/petri/sync/resolve"
	"github.com/petri-dev/petri/sync/syncer"
	"github.com/petri-dev/petri/sync/webhook"
)

// replicas are several Syncers in this process, each with its own identity
// in the manager's Lease, its own memory, metrics and webhook endpoint,
// sharing the management namespace, sync's namespace, the config repository
// and the GitHub stand-in: sync's Deployment with two replicas.
type replicas struct {
	h         *harness
	leaseNS   string
	tokenFile string
}

type replica struct {
	id      string
	s       *syncer.Syncer
	m       *metrics.Metrics
	url     string
	cancel  context.CancelFunc
	stopped chan struct{}
	err     error
}

func newReplicas(t *testing.T, files map[string]string) *replicas {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns, err := env.CreateNamespace(ctx, "sync-ha")
	require.NoError(t, err)
	leaseNS, err := env.CreateNamespace(ctx, "petri-sync")
	require.NoError(t, err)
	h := &harness{t: t, ctx: ctx, ns: ns, c: env.Client}
	h.gh = githubapi.New(githubapi.Options{Tokens: []string{"ghp_test"}})
	t.Cleanup(h.gh.Close)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("ghp_test\n"), 0o600))
	h.gitDir = t.TempDir()
	h.git, err = git.PlainInitWithOptions(h.gitDir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	require.NoError(t, err)
	h.commit(files)
	return &replicas{h: h, leaseNS: leaseNS, tokenFile: tokenFile}
}

// start runs one replica and waits until it is ready (its cache synced, the
// config loaded): a follower is ready too, it answers webhooks.
func (rs *replicas) start(id string) *replica {
	rs.h.t.Helper()
	return rs.startWith(id, env.Config)
}

// startWith runs one replica that reaches the API server through cfg.
func (rs *replicas) startWith(id string, cfg *rest.Config) *replica {
	t := rs.h.t
	t.Helper()
	m := metrics.New()
	s := rs.newSyncer(id, cfg, m, replicaLog(t, id))
	ctx, cancel := context.WithCancel(rs.h.ctx)
	r := &replica{id: id, s: s, m: m, cancel: cancel, stopped: make(chan struct{})}
	go func() {
		defer close(r.stopped)
		r.err = s.Start(ctx)
	}()
	t.Cleanup(func() { cancel(); <-r.stopped })
	srv := httptest.NewServer(api.Handler(s, &webhook.Handler{Secret: []byte(secret), Queue: s.Events(), Metrics: m}, m))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	require.Eventually(t, func() bool { return s.Ready() == nil }, 20*time.Second, 20*time.Millisecond, "replica %s not ready", id)
	return r
}

// newSyncer is a replica's syncer, reaching the API server through cfg,
// as petri-sync builds it: the shared GitHub stand-in and config
// repository, its own metrics and Lease identity.
func (rs *replicas) newSyncer(id string, cfg *rest.Config, m *metrics.Metrics, log logr.Logger) *syncer.Syncer {
	t := rs.h.t
	t.Helper()
	prov, err := ghprovider.New(ghprovider.Options{BaseURL: rs.h.gh.URL, Auth: ghprovider.TokenFile(rs.tokenFile), Observer: m, HTTPClient: &http.Client{Timeout: 2 * time.Second}})
	require.NoError(t, err)
	src, err := configrepo.New(configrepo.Options{URL: rs.h.gitDir, Branch: "main"})
	require.NoError(t, err)
	s, err := syncer.New(syncer.Options{
		RESTConfig: cfg, Scheme: controlplane.Scheme(), Namespace: rs.h.ns, Provider: prov,
		Resolver: &resolve.Resolver{HTTPClient: chartRepo.Client()}, Config: src, ConfigRepository: "acme/petri-config",
		Metrics: m, Log: log, ConfigInterval: time.Hour, ResyncInterval: time.Hour, CommentPatience: harnessPatience,
		LeaderElection: testElection(rs.leaseNS, id),
	})
	require.NoError(t, err)
	return s
}

func replicaLog(t *testing.T, id string) logr.Logger {
	return zap.New(zap.UseDevMode(true), zap.WriteTo(testWriter{t})).WithValues("replica", id)
}

// leaderAndFollower starts replica sync-a, waits until it leads, then
// starts sync-b (through startFollower, rs.start when nil), which follows.
func (rs *replicas) leaderAndFollower(startFollower func(id string) *replica) (a, b *replica) {
	t := rs.h.t
	t.Helper()
	if startFollower == nil {
		startFollower = rs.start
	}
	a = rs.start("sync-a")
	rs.waitLeader(a, 20*time.Second)
	b = startFollower("sync-b")
	require.False(t, b.s.Leader(), "sync-b follows")
	return a, b
}

// stop ends a replica as SIGTERM does: it stops acting, then releases the
// Lease.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	<-r.stopped
	require.NoError(t, r.err)
}

func (r *replica) send(t *testing.T, d githubapi.Delivery) int {
	t.Helper()
	resp, err := d.Send(context.Background(), nil, r.url+api.WebhookPath, []byte(secret))
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// total sums every series of a metric family of the replica's registry.
func (r *replica) total(t *testing.T, name string) float64 {
	t.Helper()
	families, err := r.m.Registry.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += value(m)
		}
	}
	return sum
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// testElection is the replicas' leader election: the Lease timings of
// earlier releases (15 s, renewed within 10 s, tried every 2 s), shorter
// than the defaults, so that a lost or released Lease changes hands within
// a test's patience.
func testElection(namespace, id string) *syncer.LeaderElection {
	return &syncer.LeaderElection{Namespace: namespace, Identity: id,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// refreshes is what the replica counted of refresh marks with result.
func (r *replica) refreshes(t *testing.T, result string) float64 {
	t.Helper()
	families, err := r.m.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "petri_sync_refresh_marks_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.Counter.GetValue()
				}
			}
		}
	}
	return 0
}

// recorded checks that the replica counted want refresh marks with result,
// once it has counted that many: a replica counts its recorded marks after
// its write of the Repository returns, and the leader may have taken, acted
// on and removed them before that.
func (r *replica) recorded(t *testing.T, result string, want float64, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return r.refreshes(t, result) >= want }, 10*time.Second, 10*time.Millisecond, msgAndArgs...)
	assert.Equal(t, want, r.refreshes(t, result), msgAndArgs...)
}

// holder is the identity in sync's Lease.
func (rs *replicas) holder() string {
	var l coordinationv1.Lease
	if err := env.Client.Get(rs.h.ctx, client.ObjectKey{Namespace: rs.leaseNS, Name: syncer.DefaultLeaseName}, &l); err != nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

func (rs *replicas) waitLeader(r *replica, within time.Duration) {
	rs.h.t.Helper()
	require.Eventually(rs.h.t, func() bool { return r.s.Leader() && rs.holder() == r.id }, within, 20*time.Millisecond, "%s does not lead", r.id)
}

// pending are the refresh marks waiting on the Repositories of sync's
// namespace, by Repository and annotation.
func (rs *replicas) pending() map[string]string {
	return pendingMarks(rs.h.ctx, rs.leaseNS)
}

func pendingMarks(ctx context.Context, namespace string) map[string]string {
	var list petriv1.RepositoryList
	if err := env.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return map[string]string{"error": err.Error()}
	}
	out := map[string]string{}
	for _, r := range list.Items {
		for k, v := range r.Annotations {
			if strings.HasPrefix(k, petriv1.RefreshAnnotationPrefix) {
				out[r.Name+"/"+k] = v
			}
		}
	}
	return out
}

// requests counts the GitHub stand-in's answered requests of one method
// whose path ends with suffix.
func requests(gh *githubapi.Server, method, suffix string) int {
	n := 0
	for _, r := range gh.Requests() {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) && r.Status < 300 {
			n++
		}
	}
	return n
}

func commentPosts(gh *githubapi.Server, number int) int {
	return requests(gh, http.MethodPost, fmt.Sprintf("/repos/%s/issues/%d/comments", ghRepo, number))
}

func openPR(t *testing.T, gh *githubapi.Server, to *replica) githubapi.PullRequest {
	t.Helper()
	pr := gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	d, err := gh.PullRequestEvent(ghRepo, pr.Number, "opened")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, to.send(t, d))
	return pr
}

// ready is the operator's status of an environment deployed and Ready.
func ready(e *petriv1.EphemeralEnvironment) {
	deployedAs(petriv1.EnvironmentReady, readyTrue)(e)
}

// readyTrue is the Ready condition of an environment that serves.
var readyTrue = metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionTrue, Reason: petriv1.ReasonSucceeded}

// deployedAs is the operator's status of an environment whose components
// are deployed, in phase, with the Ready condition readyCond.
func deployedAs(phase petriv1.EnvironmentPhase, readyCond metav1.Condition) func(*petriv1.EphemeralEnvironment) {
	return func(e *petriv1.EphemeralEnvironment) {
		e.Status.ObservedGeneration = e.Generation
		e.Status.TargetNamespace = "shop-pr-ha-ab12"
		e.Status.Phase = phase
		readyCond.ObservedGeneration = e.Generation
		meta.SetStatusCondition(&e.Status.Conditions, readyCond)
		e.Status.Components = []petriv1.ComponentStatus{{Name: "api", Phase: petriv1.ComponentDeployed, Generation: e.Generation}, {Name: "web", Phase: petriv1.ComponentDeployed, Generation: e.Generation}}
	}
}

// Two replicas: the one holding the Lease writes environments and reports
// on the pull request; the other answers webhooks, serves the read API and
// is ready, but never writes an environment nor calls GitHub.
func TestOnlyTheLeaderWritesAndReports(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	h := rs.h
	a, b := rs.leaderAndFollower(nil)
	assert.False(t, b.s.Leader())
	assert.Equal(t, "sync-a", b.s.LeaderIdentity())
	assert.Equal(t, http.StatusOK, getJSON(t, b.url+"/readyz", nil), "a follower is ready: it answers webhooks")

	pr := openPR(t, h.gh, a)
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, pr.HeadSHA)
		cs := h.gh.Comments(ghRepo, pr.Number)
		return len(sts) > 0 && sts[len(sts)-1].State == "success" && len(cs) == 1 && strings.Contains(cs[0].Body, "shop-pr-ha-ab12")
	}, 10*time.Second, 10*time.Millisecond)
	b.s.Resync() // a follower's resync acts on nothing

	// The follower's read API shows the environment from its own cache.
	var list struct{ Items []syncer.Environment }
	require.Eventually(t, func() bool {
		return getJSON(t, b.url+api.EnvironmentsPath, &list) == http.StatusOK && len(list.Items) == 1 && list.Items[0].Phase == "Ready"
	}, 10*time.Second, 10*time.Millisecond)
	rev, _ := b.s.Applications()
	assert.NotEmpty(t, rev, "the follower keeps the config")

	assert.Positive(t, a.total(t, "petri_sync_writes_total"))
	assert.Positive(t, a.total(t, "petri_sync_github_requests_total"))
	assert.Equal(t, 1.0, a.total(t, "petri_sync_leader"))
	assert.Zero(t, b.total(t, "petri_sync_writes_total"), "the follower wrote nothing")
	assert.Zero(t, b.total(t, "petri_sync_github_requests_total"), "the follower called GitHub for nothing")
	assert.Zero(t, b.total(t, "petri_sync_reconciles_total"), "the follower reconciled nothing")
	assert.Zero(t, b.total(t, "petri_sync_leader"))
	assert.Equal(t, 1, commentPosts(h.gh, pr.Number))
	assert.Len(t, h.gh.Comments(ghRepo, pr.Number), 1)
}

// A webhook delivered to the follower is recorded as a refresh mark on its
// repository's Repository and acted on by the leader, which removes the
// mark: an opened pull request (also while the listing lags and does not
// show it yet), a push to the config repository, a closed pull request.
func TestWebhookToTheFollowerIsActedOnByTheLeader(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	h := rs.h
	a, b := rs.leaderAndFollower(nil)

	pr := openPR(t, h.gh, b)
	h.waitEnv(envName(pr.Number), nil)
	// The environment can be there before the follower's mark is (the
	// leader's own listing may find the pull request first): the mark is
	// waited for, then its taking and removal by the leader.
	b.recorded(t, "recorded", 1)
	require.Eventually(t, func() bool { return a.refreshes(t, "taken") >= 1 && len(rs.pending()) == 0 }, 10*time.Second, 10*time.Millisecond, "the leader takes the mark and removes it: %v", rs.pending())
	assert.Equal(t, 1.0, a.refreshes(t, "taken"))
	var repo petriv1.Repository
	require.NoError(t, env.Client.Get(h.ctx, client.ObjectKey{Namespace: rs.leaseNS, Name: syncer.RepositoryObjectName(ghRepo)}, &repo))
	assert.Equal(t, petriv1.RepositorySpec{Forge: "github", Repository: ghRepo}, repo.Spec, "the mark is on the repository's Repository")
	require.Eventually(t, func() bool { return len(h.gh.Comments(ghRepo, pr.Number)) == 1 }, 10*time.Second, 10*time.Millisecond)

	// GitHub's listing lags and does not show the next pull request yet:
	// the mark carries no payload, so the leader reads it on its own.
	h.gh.SetFault(&githubapi.Fault{EmptyList: true})
	lagging := openPR(t, h.gh, b)
	h.waitEnv(envName(lagging.Number), nil)
	h.gh.SetFault(nil)

	// A push to the config repository, delivered to the follower: both
	// load the new revision (the leader applies it).
	sha := h.commit(shopFiles("# a comment\n"))
	d, err := githubapi.PushEvent("acme/petri-config", "main", sha)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, b.send(t, d))
	require.Eventually(t, func() bool {
		ra, _ := a.s.Applications()
		rb, _ := b.s.Applications()
		return ra == sha && rb == sha
	}, 10*time.Second, 10*time.Millisecond)

	// An event of a repository no application watches is not recorded.
	const before = 3
	b.recorded(t, "recorded", before, "the two opened pull requests and the config push")
	other, err := githubapi.PushEvent("acme/elsewhere", "main", sha)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, b.send(t, other))

	// Closed, delivered to the follower: the leader confirms and deletes.
	h.gh.UpdatePullRequest(ghRepo, pr.Number, func(p *githubapi.PullRequest) { p.State = "closed" })
	d, err = h.gh.PullRequestEvent(ghRepo, pr.Number, "closed")
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, b.send(t, d))
	h.waitGone(envName(pr.Number))
	require.Eventually(t, func() bool { return len(rs.pending()) == 0 }, 10*time.Second, 10*time.Millisecond)
	b.recorded(t, "recorded", before+1, "the closed event only; not the other repository's push")
	var repos petriv1.RepositoryList
	require.NoError(t, env.Client.List(h.ctx, &repos, client.InNamespace(rs.leaseNS)))
	require.Eventually(t, func() bool {
		return env.Client.List(h.ctx, &repos, client.InNamespace(rs.leaseNS)) == nil && len(repos.Items) == 1
	}, 10*time.Second, 10*time.Millisecond, "only the watched repository keeps its Repository (the config repository's is deleted once taken): %v", repos.Items)
	assert.Equal(t, ghRepo, repos.Items[0].Spec.Repository)
	assert.Zero(t, b.total(t, "petri_sync_writes_total"))
	assert.Zero(t, b.total(t, "petri_sync_github_requests_total"))
	assert.Equal(t, 1, commentPosts(h.gh, pr.Number))
	// The lagging one's environment is still deploying: its comment
	// waits its patience.
	require.Eventually(t, func() bool { return commentPosts(h.gh, lagging.Number) == 1 }, 10*time.Second, 10*time.Millisecond)
}

// The leader stops (as on SIGTERM: it stops acting, then releases the
// Lease): the follower takes over at once, its first resync gives an
// environment to a pull request whose webhook was lost, and it edits the
// comment the old leader posted instead of posting another; no status is
// posted twice.
func TestFollowerTakesOverWithoutLossOrDuplicates(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	h := rs.h
	a, b := rs.leaderAndFollower(nil)

	first := openPR(t, h.gh, a)
	name := envName(first.Number)
	h.waitEnv(name, nil)
	// Ready only once the deploy's pending status is posted: set at once,
	// the first feedback may already see it Ready and post no pending.
	require.Eventually(t, func() bool { return len(h.gh.Statuses(ghRepo, first.HeadSHA)) > 0 }, 10*time.Second, 10*time.Millisecond)
	setStatus(t, h, name, ready)
	require.Eventually(t, func() bool {
		sts := h.gh.Statuses(ghRepo, first.HeadSHA)
		cs := h.gh.Comments(ghRepo, first.Number)
		return len(sts) > 0 && sts[len(sts)-1].State == "success" && len(cs) == 1 && strings.Contains(cs[0].Body, "shop-pr-ha-ab12")
	}, 10*time.Second, 10*time.Millisecond)
	// A pull request whose webhook never arrived: no replica knows of it.
	lost := h.gh.OpenPullRequest(ghRepo, githubapi.PullRequest{Labels: []string{"preview"}})
	editsBefore := h.gh.Comments(ghRepo, first.Number)[0].Edits

	start := wall.Now()
	a.stop(t)
	rs.waitLeader(b, 15*time.Second)
	takeover := wall.Since(start)
	t.Logf("the follower led %s after the leader stopped", takeover.Round(time.Millisecond))
	assert.Less(t, takeover, 5*time.Second, "a released Lease is taken within the retry period")

	// The new leader's first resync closes the gap.
	h.waitEnv(envName(lost.Number), nil)
	require.Eventually(t, func() bool { return len(h.gh.Comments(ghRepo, lost.Number)) == 1 }, 10*time.Second, 10*time.Millisecond)

	// The new leader, with nothing in memory, edits the old leader's
	// comment when something changes.
	setStatus(t, h, name, func(e *petriv1.EphemeralEnvironment) {
		e.Status.Phase = petriv1.EnvironmentFailed
		meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployFailed, Message: "web failed", ObservedGeneration: e.Generation})
		e.Status.Components[1] = petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: e.Generation, LastError: "ImagePullBackOff: web:abc"}
	})
	require.Eventually(t, func() bool {
		cs := h.gh.Comments(ghRepo, first.Number)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "ImagePullBackOff") && cs[0].Edits > editsBefore
	}, 10*time.Second, 10*time.Millisecond)

	// And it acts on webhooks itself now.
	third := openPR(t, h.gh, b)
	h.waitEnv(envName(third.Number), nil)
	require.Eventually(t, func() bool { return len(h.gh.Comments(ghRepo, third.Number)) == 1 }, 10*time.Second, 10*time.Millisecond)

	var states []string
	for _, s := range h.gh.Statuses(ghRepo, first.HeadSHA) {
		states = append(states, s.State)
	}
	assert.Equal(t, []string{"pending", "success", "failure"}, states, "one status per transition across the change of leader, never a repeat")
	for _, n := range []int{first.Number, lost.Number, third.Number} {
		assert.Equal(t, 1, commentPosts(h.gh, n), "comments posted on #%d", n)
		assert.Len(t, h.gh.Comments(ghRepo, n), 1, "comments on #%d", n)
	}
}

// A leader that cannot renew its Lease (another identity holds it) stops
// acting once the renew deadline has passed, and Start says why: the
// process ends rather than going on with what it remembers.
func TestLeaderThatLosesTheLeaseStops(t *testing.T) {
	t.Parallel()
	rs := newReplicas(t, shopFiles(""))
	h := rs.h
	a := rs.start("sync-a")
	rs.waitLeader(a, 20*time.Second)

	var l coordinationv1.Lease
	require.Eventually(t, func() bool {
		if err := env.Client.Get(h.ctx, client.ObjectKey{Namespace: rs.leaseNS, Name: syncer.DefaultLeaseName}, &l); err != nil {
			return false
		}
		l.Spec.HolderIdentity = ptr.To("someone-else")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		l.Spec.RenewTime = &metav1.MicroTime{Time: wall.Now()}
		return env.Client.Update(h.ctx, &l) == nil
	}, 10*time.Second, 10*time.Millisecond)
	start := wall.Now()
	select {
	case <-a.stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader went on after losing its Lease")
	}
	t.Logf("the leader stopped %s after its Lease was taken", wall.Since(start).Round(time.Millisecond))
	require.ErrorIs(t, a.err, syncer.ErrLeadershipLost)
	assert.False(t, a.s.Leader())
	assert.Equal(t, "someone-else", rs.holder(), "the Lease it lost is not released over its holder")
	writes := a.total(t, "petri_sync_writes_total")
	pr := openPR(t, h.gh, a)
	assert.Never(t, func() bool { _, err := h.get(envName(pr.Number)); return err == nil }, 2*time.Second, 50*time.Millisecond)
	assert.Equal(t, writes, a.total(t, "petri_sync_writes_total"))
}
