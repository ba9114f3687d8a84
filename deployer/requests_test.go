package deployer_test

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/petri-dev/petri/deployer"
)

// requestCounter counts the requests a deployer sends, by verb and what
// they are about: "LIST secrets", "GET leases", "GET /version".
type requestCounter struct {
	mu   sync.Mutex
	seen map[string]int
	next http.RoundTripper
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.seen[requestKind(r)]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

// requestKind is "VERB resource" for a request to a resource (LIST for a
// GET of a collection), "VERB path" for anything else.
func requestKind(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/namespaces/NS/RESOURCE[/NAME[/SUB]] or
	// /apis/GROUP/VERSION/namespaces/NS/RESOURCE[/NAME[/SUB]]
	i := 2
	if parts[0] == "apis" {
		i = 3
	}
	if len(parts) < i+3 || parts[i] != "namespaces" {
		return r.Method + " " + r.URL.Path
	}
	resource, named := parts[i+2], len(parts) > i+3
	verb := r.Method
	switch {
	case verb == http.MethodGet && r.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case verb == http.MethodGet && !named:
		verb = "LIST"
	}
	return verb + " " + resource
}

// take returns the counts so far and starts again from zero.
func (c *requestCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.seen
	c.seen = map[string]int{}
	return out
}

func total(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

// countingDeployer is a deployer in ns, as the cluster administrator, whose
// requests c counts, made the way a deploy Job's process makes its one.
func countingDeployer(t *testing.T, ns string) (*deployer.Deployer, *requestCounter) {
	t.Helper()
	c := &requestCounter{seen: map[string]int{}}
	getter := deployer.NewRESTClientGetter(env.Kubeconfig, ns)
	flags := deployer.FlagsOf(getter)
	wrap := flags.WrapConfigFn
	flags.WrapConfigFn = func(cfg *rest.Config) *rest.Config {
		cfg = wrap(cfg)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.next = rt
			return c
		})
		return cfg
	}
	d, err := deployer.New(getter, ns, logr.Discard())
	require.NoError(t, err)
	require.Empty(t, c.take(), "making a deployer sends nothing")
	return d, c
}

// What one deploy sends to the API server, of the example chart (a
// Deployment of no replicas and a Service), without waiting. Each deploy
// Job pays it, and the API server serves it for every Job:
//
//   - the release's lock: one create and one delete (a get, a create and
//     an update before);
//   - the release's records: one list (three before: the deployer's read
//     of the latest, install's of the history it may replace, and its
//     replace's; upgrade's of the deployed and the history MaxHistory
//     prunes), then the pending record's create and its update to the
//     outcome (and for an upgrade the superseded one's);
//   - discovery: /version, /api and /apis once (Helm's check that the API
//     server is reachable read /version again);
//   - the chart's objects: Helm's reads and writes of them.
func TestDeploySendsFewRequests(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d, c := countingDeployer(t, ns)
	ch := localChart(t, "example-app")

	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: map[string]any{"replicas": 0}})
	require.NoError(t, err)
	install := c.take()
	assert.Equal(t, map[string]int{
		"POST leases": 1, "DELETE leases": 1,
		"LIST secrets": 1, "POST secrets": 1, "PUT secrets": 1,
		"GET /version": 1, "GET /api": 1, "GET /apis": 1,
		// Helm's check that none of the objects exists yet, and their
		// creates.
		"GET services": 1, "GET deployments": 1, "POST services": 1, "POST deployments": 1,
	}, install, "an install's requests")
	assert.LessOrEqual(t, total(install), 12)

	_, err = d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: map[string]any{"replicas": 0, "message": "two"}})
	require.NoError(t, err)
	upgrade := c.take()
	assert.Equal(t, 1, upgrade["LIST secrets"], "an upgrade lists the release's records once: %v", upgrade)
	assert.Equal(t, 1, upgrade["POST leases"], "an upgrade takes the free lock with a create: %v", upgrade)
	assert.Equal(t, 1, upgrade["DELETE leases"], "and gives it back with a delete: %v", upgrade)
	assert.Zero(t, upgrade["GET leases"]+upgrade["PUT leases"], "%v", upgrade)
	assert.Equal(t, 1, upgrade["GET /version"], "%v", upgrade)
	assert.LessOrEqual(t, total(upgrade), 15, "an upgrade's requests: %v", upgrade)
}

// A deploy that waits for the example chart's objects reads them from a
// watch of each kind it waits for: it sends the requests of one that does
// not wait and a watch of Deployments and of ReplicaSets, where Helm's
// wait read each object every 2 seconds (a GET of the Service, of the
// Deployment and a LIST of its ReplicaSets each time; the first look,
// right after the create, always finds no ReplicaSet yet, so a deploy
// waited 2 seconds at least, renewing its lock, and the pods' diagnosis
// read the Deployment, its ReplicaSets and the pods once more).
func TestDeployWaitReadsFromWatches(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d, c := countingDeployer(t, ns)
	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: localChart(t, "example-app"), Values: map[string]any{"replicas": 0}, Wait: true, Timeout: 30 * time.Second})
	require.NoError(t, err)
	counts := c.take()
	watches := map[string]int{}
	for k, v := range counts {
		if strings.HasPrefix(k, "WATCH ") {
			watches[k] = v
			delete(counts, k)
		}
	}
	assert.Equal(t, 1, counts["GET services"], "only Helm's check that it does not exist yet: %v", counts)
	assert.Equal(t, 1, counts["GET deployments"], "only Helm's check that it does not exist yet: %v", counts)
	assert.Zero(t, counts["LIST replicasets"]+counts["LIST pods"]+counts["PUT leases"], "%v", counts)
	assert.LessOrEqual(t, total(counts), 12, "%v", counts)
	assert.Equal(t, map[string]int{"WATCH deployments": 1, "WATCH replicasets": 1}, watches)
}

// A deployer whose lock was taken over while its operation ran (it stopped
// renewing it for longer than its duration, here by force) gives up its
// operation and leaves the Lease to its new holder when it ends: it deletes
// only the Lease it last wrote.
func TestReleasingTheLockLeavesALeaseTakenOver(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	leases := env.Clientset.CoordinationV1().Leases(ns)
	// No node runs the pods here: one replica keeps the deploy waiting.
	deploy := deployAsync(t, newDeployer(t, ns), deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: map[string]any{"replicas": 1}, Timeout: time.Minute})
	require.Eventually(t, func() bool {
		lease, err := leases.Get(ctx, deployer.LockName("web"), metav1.GetOptions{})
		if err != nil {
			return false
		}
		lease.Spec.HolderIdentity = ptr.To("deployer-that-took-over")
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)

	err := awaitFailure(t, deploy, 30*time.Second)
	assert.True(t, errors.Is(err, deployer.ErrReleaseLockLost), "%v", err)
	lease, err := leases.Get(ctx, deployer.LockName("web"), metav1.GetOptions{})
	require.NoError(t, err, "the new holder's Lease is left")
	assert.Equal(t, "deployer-that-took-over", ptr.Deref(lease.Spec.HolderIdentity, ""))
}

// Records written by another client between two operations are seen by
// the next: each operation lists the release's records afresh.
func TestEachDeployReadsTheRecordsAfresh(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ns := namespace(t)
	d := newDeployer(t, ns)
	ch := localChart(t, "greeter")
	_, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: greeterValues("one", "v1")})
	require.NoError(t, err)
	// Another client deletes the release's records: the release is gone.
	require.NoError(t, env.Clientset.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "owner=helm,name=web"}))
	rel, err := d.Deploy(ctx, deployer.DeployRequest{Release: "web", Chart: ch, Values: greeterValues("two", "v2")})
	require.NoError(t, err)
	assert.Equal(t, 1, rel.Version, "installed again, not upgraded from the deleted records")
	_, err = env.Clientset.CoordinationV1().Leases(ns).Get(ctx, deployer.LockName("web"), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "%v", err)
}

// A deploy keeps discovery in memory: it writes nothing to the temporary
// directory, where ConfigFlags' disk cache wrote every discovery document
// twice in each Job (a Job's temporary directory is new, and Helm
// invalidates discovery before each action, so none was ever read). Not
// parallel: it sets TMPDIR.
func TestDeployWritesNoDiscoveryCache(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ns := namespace(t)
	_, err := newDeployer(t, ns).Deploy(testContext(t), deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: greeterValues("one", "v1")})
	require.NoError(t, err)
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "written to the temporary directory")
}

// A wait looks again when a watched object changes, not more: over a wait
// of 3 seconds for a Deployment whose pod never runs (no node here), Helm's
// readiness checks run a few times (at the start, at each change the
// controllers make, every 2 seconds), each logging what is not ready. A
// wait that registered its watch handler again at each look (an
// informer's Informer() is a new value each time) was told every object
// anew at each look, and looked again at once: thousands of looks.
func TestDeployWaitLooksAgainOnlyOnChanges(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	var mu sync.Mutex
	looks := 0
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, "is not ready") {
			mu.Lock()
			looks++
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 1})
	d, err := deployer.New(deployer.NewRESTClientGetter(env.Kubeconfig, ns), ns, log)
	require.NoError(t, err)
	_, err = d.Deploy(testContext(t), deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: map[string]any{"replicas": 1}, Wait: true, Timeout: 3 * time.Second})
	require.Error(t, err, "no node runs the pod")
	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, looks)
	assert.Less(t, looks, 30, "readiness checks in a wait of 3 seconds")
}

// slowLeases makes the API server's answers to Lease renewals (PUT) take
// delay while slow is set, as a saturated API server answers.
type slowLeases struct {
	delay time.Duration
	slow  atomic.Bool
	next  http.RoundTripper
}

func (s *slowLeases) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.slow.Load() && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/leases/") {
		t := time.NewTimer(s.delay)
		select {
		case <-r.Context().Done():
			t.Stop()
			return nil, r.Context().Err()
		case <-t.C:
		}
	}
	return s.next.RoundTrip(r)
}

// A renewal of the release's Lease that takes longer than usual (a
// saturated API server answered Lease updates in 3 to 5 seconds while
// others timed out) is waited for and tried again while the Lease is still
// this deployer's: the Helm operation goes on to its own end, here the
// wait's timeout, and is not cancelled with "release lock lost".
func TestSlowLeaseRenewalsKeepTheRelease(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	slow := &slowLeases{delay: 3 * time.Second}
	getter := deployer.NewRESTClientGetter(env.Kubeconfig, ns)
	flags := deployer.FlagsOf(getter)
	wrap := flags.WrapConfigFn
	flags.WrapConfigFn = func(cfg *rest.Config) *rest.Config {
		cfg = wrap(cfg)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			slow.next = rt
			return slow
		})
		return cfg
	}
	d, err := deployer.New(getter, ns, logr.Discard())
	require.NoError(t, err)
	slow.slow.Store(true)
	// No node runs the pods here: one replica keeps the deploy waiting for
	// its whole timeout, through several renewals.
	start := time.Now()
	deploy := deployAsync(t, d, deployer.DeployRequest{Release: "web", Chart: localChart(t, "greeter"), Values: map[string]any{"replicas": 1}, Timeout: 14 * time.Second})
	err = awaitFailure(t, deploy, time.Minute)
	assert.False(t, errors.Is(err, deployer.ErrReleaseLockLost), "the release was given up: %v", err)
	assert.GreaterOrEqual(t, time.Since(start), 14*time.Second, "the deploy waited its whole timeout: %v", err)
}
