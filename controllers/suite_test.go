package controllers_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/tests/charts"
)

const (
	mgmtNS        = "petri-system"
	sharedNS      = "petri-shared"
	deployerImage = "petri.dev/deployer"
	helperImage   = "petri.dev/testhelper"
	// appImage runs the example application (examples/app) on the local
	// node. The example charts' own image, petri.dev/example-app, is left
	// unknown to it, so their pods stay Pending as on a cluster without a
	// node for them.
	appImage = "petri.dev/app"
	// hashPrefix starts every workload namespace hash in these tests, so two
	// environments with the same name prefix collide on the first characters.
	hashPrefix = "c0ffee"
	// chartCASecret holds the CA of the test chart repository.
	chartCASecret = "petri-chart-ca"
	// imageCharts is where the deployer image carries the example charts.
	imageCharts = "/charts"
)

var (
	chartRepo *charts.Repository
	registry  *charts.Registry

	env     *controlplane.Cluster
	scratch string
	bins    map[string]string

	operatorMu   sync.Mutex
	stopOperator func()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	setParallel()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	var err error
	scratch, err = os.MkdirTemp("", "controllers-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)
	bins, err = controlplane.Build(filepath.Join(scratch, "bin"), "./cmd/petri-deployer", "./tests/cmd/petri-standin", "./tests/cmd/petri-testhelper", "./examples/app")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	standInServer := serveStandIns()
	defer standInServer.Close()
	env, err = controlplane.Start(controlplane.Options{
		Images: map[string]string{
			// The stand-in runs the real deployer unless a test scripted
			// the Job (standin_test.go).
			deployerImage: bins["petri-standin"],
			helperImage:   bins["petri-testhelper"],
			appImage:      bins["app"],
		},
		// The deployer image carries the example charts under /charts.
		ImageFiles: map[string]map[string]string{deployerImage: {imageCharts: chartsDir()}},
		Env:        []string{"PETRI_STANDIN_URL=" + standInServer.URL},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	defer func() { stopWorkload() }()
	ctx := context.Background()
	for _, ns := range []string{mgmtNS, sharedNS} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if chartRepo, err = charts.ServeRepository(chartsDir(), filepath.Join(scratch, "repo")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer chartRepo.Close()
	if registry, err = charts.ServeRegistry(chartsDir(), filepath.Join(scratch, "registry")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer registry.Close()
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: chartCASecret},
		Data:       map[string][]byte{"ca.crt": chartRepo.CA},
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := env.Apply(ctx, rbacManifests()...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := startOperator(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		operatorMu.Lock()
		defer operatorMu.Unlock()
		stopOperator()
	}()
	return m.Run()
}

// parallelTests is how many of this package's parallel tests run at once
// unless -parallel says otherwise. They spend their time waiting for the
// control plane, its Job controller and the Jobs' pods, not on a CPU:
// GOMAXPROCS (go test's default), two on a small machine, would leave the
// machine idle while each test waits.
const parallelTests = 8

func setParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(parallelTests))
	}
}

func zapLevel() zapcore.Level {
	if os.Getenv("PETRI_TEST_VERBOSE") != "" {
		return -1
	}
	return 1
}

func rbacManifests() []string {
	root, _ := controlplane.RepoRoot()
	dir := filepath.Join(root, "config", "rbac")
	return []string{
		filepath.Join(dir, "service_account.yaml"),
		filepath.Join(dir, "generated", "role.yaml"),
		filepath.Join(dir, "cluster_role_binding.yaml"),
		filepath.Join(dir, "role_binding.yaml"),
	}
}

// testOptions are the production defaults with the test's images, fast
// retries and the colliding hash prefix.
func testOptions() controllers.Options {
	o := controllers.DefaultOptions()
	o.DeployerImage = deployerImage + ":dev"
	o.MetricsAddr = "0"
	o.ProbeAddr = "0"
	o.TeardownBackoff = 200 * time.Millisecond
	o.SharedWorkloadRetryBackoff = 500 * time.Millisecond
	o.JobBackoffLimit = 0
	o.ChartCASecret = chartCASecret
	o.PlainHTTPRegistries = []string{registry.Host}
	o.NamespaceHash = func(uid string) string { return hashPrefix + naming.UIDHash(types.UID(uid)) }
	o.VerifyInterval = verifyInterval
	o.DeployerAuthorizationTimeout = authorizationTimeout
	o.Clock = testClock
	o.ClusterProbeInterval = 300 * time.Millisecond
	return o
}

// verifyInterval is the operator's --verify-interval in these tests: off,
// except while a test that needs periodic verify Jobs runs (withVerifyInterval).
var verifyInterval time.Duration

// startOperator runs the operator the way production does: NewManager with
// the production wiring, authenticated as its ServiceAccount with the RBAC of
// config/rbac, leader election on.
func startOperator() error {
	operatorMu.Lock()
	defer operatorMu.Unlock()
	cfg, err := env.ServiceAccountConfig(context.Background(), mgmtNS, "petri-operator")
	if err != nil {
		return err
	}
	cfg.Wrap(countWrites)
	mgr, err := controllers.NewManager(cfg, testOptions())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopOperator = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "operator stopped with error:", err)
		}
	}
	return nil
}

// operatorWrites counts the operator's write requests to the API server.
var operatorWrites atomic.Int64

type writeCounter struct{ next http.RoundTripper }

func (w writeCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if resp := injectedFault(r); resp != nil {
		return resp, nil
	}
	if err := holdJobCreate(r); err != nil {
		return nil, err
	}
	if r.Method == http.MethodGet {
		operatorWriteLog.Lock()
		if strings.HasSuffix(r.URL.Path, "/jobs") {
			operatorWriteLog.jobLists = append(operatorWriteLog.jobLists, r.URL.Query().Get("labelSelector"))
		}
		operatorWriteLog.reads = append(operatorWriteLog.reads, r.URL.Path)
		operatorWriteLog.Unlock()
	}
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/rolebindings/") {
		operatorWriteLog.Lock()
		operatorWriteLog.roleBindingReads = append(operatorWriteLog.roleBindingReads, r.URL.Path)
		operatorWriteLog.sequence = append(operatorWriteLog.sequence, r.Method+" "+r.URL.Path)
		operatorWriteLog.Unlock()
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		operatorWrites.Add(1)
		operatorWriteLog.Lock()
		operatorWriteLog.requests = append(operatorWriteLog.requests, r.Method+" "+r.URL.Path)
		operatorWriteLog.sequence = append(operatorWriteLog.sequence, r.Method+" "+r.URL.Path)
		operatorWriteLog.Unlock()
	}
	return w.next.RoundTrip(r)
}

// waitPassAfterLastWrite waits until the operator has read the settled
// environment's RoleBinding (the one uncached read of its every pass) after
// its last write of the environment: the pass its own last write asked for
// has run, and a pass of the environment from now on has another cause.
// Each write of an environment wakes it once more, and a test that counts
// passes from the moment it sees the state that write made would count that
// pass too.
func waitPassAfterLastWrite(t testing.TB, name, namespace string) {
	t.Helper()
	own := func(entry string) bool {
		path := entry[strings.IndexByte(entry, ' ')+1:]
		return strings.HasSuffix(path, "/ephemeralenvironments/"+name) || strings.HasSuffix(path, "/ephemeralenvironments/"+name+"/status")
	}
	read := "/namespaces/" + namespace + "/rolebindings/"
	require.True(t, eventually(30*time.Second, func() bool {
		operatorWriteLog.Lock()
		defer operatorWriteLog.Unlock()
		for i := len(operatorWriteLog.sequence) - 1; i >= 0; i-- {
			switch e := operatorWriteLog.sequence[i]; {
			case strings.HasPrefix(e, "GET ") && strings.Contains(e, read):
				return true
			case !strings.HasPrefix(e, "GET ") && own(e):
				return false
			}
		}
		return false
	}), "no pass of %s read its RoleBinding after the operator's last write of it", name)
}

// operatorWriteLog keeps the method and path of every write request of the
// operator.
var operatorWriteLog struct {
	sync.Mutex
	requests []string
	// roleBindingReads are the paths of its RoleBinding GETs: the one
	// uncached read of a settled environment's pass.
	roleBindingReads []string
	// jobLists are the label selectors of its Job lists (the cache's own
	// list and watch among them).
	jobLists []string
	// reads are the paths of all its GET requests.
	reads []string
	// sequence are its writes and RoleBinding reads, method and path, in
	// the order they were sent.
	sequence []string
}

// readsOf counts the operator's GET requests of path.
func readsOf(path string) int {
	return countLogged(func() []string { return operatorWriteLog.reads }, func(p string) bool { return p == path })
}

// jobListsNaming counts the operator's Job lists whose label selector
// contains part.
func jobListsNaming(part string) int {
	return countLogged(func() []string { return operatorWriteLog.jobLists }, func(sel string) bool { return strings.Contains(sel, part) })
}

// roleBindingReadsIn counts the operator's RoleBinding reads in namespace.
func roleBindingReadsIn(namespace string) int {
	return countLogged(func() []string { return operatorWriteLog.roleBindingReads }, func(p string) bool { return strings.Contains(p, "/namespaces/"+namespace+"/") })
}

// countLogged counts the entries of one of operatorWriteLog's lists that
// match, under its lock.
func countLogged(list func() []string, match func(string) bool) int {
	operatorWriteLog.Lock()
	defer operatorWriteLog.Unlock()
	n := 0
	for _, e := range list() {
		if match(e) {
			n++
		}
	}
	return n
}

// jobCreateHold holds the operator's Job creates of one environment until
// a number of them are in flight at once, or a time passes: it tells
// whether they were sent together.
type jobCreateHold struct {
	env     string
	want    int
	mu      sync.Mutex
	waiting int
	most    int
	// all is closed once want were in flight at once.
	all      chan struct{}
	released bool
	timeout  time.Duration
}

var jobHolds struct {
	sync.Mutex
	m map[string]*jobCreateHold
}

// holdJobCreates holds the operator's Job creates for the environment
// until want of them are in flight at once (or timeout passes, after which
// each is let through alone); most reports the most seen at once.
func holdJobCreates(t *testing.T, envName string, want int, timeout time.Duration) *jobCreateHold {
	h := &jobCreateHold{env: envName, want: want, all: make(chan struct{}), timeout: timeout}
	jobHolds.Lock()
	if jobHolds.m == nil {
		jobHolds.m = map[string]*jobCreateHold{}
	}
	jobHolds.m[envName] = h
	jobHolds.Unlock()
	t.Cleanup(func() {
		jobHolds.Lock()
		delete(jobHolds.m, envName)
		jobHolds.Unlock()
	})
	return h
}

func (h *jobCreateHold) mostAtOnce() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most
}

// holdJobCreate holds a Job create that a hold names (its body carries the
// environment's label).
func holdJobCreate(r *http.Request) error {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/jobs") || r.GetBody == nil {
		return nil
	}
	jobHolds.Lock()
	holds := make([]*jobCreateHold, 0, len(jobHolds.m))
	for _, h := range jobHolds.m {
		holds = append(holds, h)
	}
	jobHolds.Unlock()
	if len(holds) == 0 {
		return nil
	}
	body, err := r.GetBody()
	if err != nil {
		return err
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	for _, h := range holds {
		// The Job's name begins with the environment's (the body is JSON or
		// protobuf: both carry it as it is).
		if !strings.Contains(string(data), h.env+"-") || !strings.Contains(string(data), petriv1.LabelEnvironment) {
			continue
		}
		h.mu.Lock()
		h.waiting++
		h.most = max(h.most, h.waiting)
		if h.waiting == h.want && !h.released {
			close(h.all)
			h.released = true
		}
		h.mu.Unlock()
		select {
		case <-h.all:
		case <-time.After(h.timeout):
		}
		h.mu.Lock()
		h.waiting--
		h.mu.Unlock()
	}
	return nil
}

// faults are the operator's requests the API server seems to fail: a
// method and a path part, answered 503 (the API server overloaded) while
// set. They stand for a transient fault between the operator and the API
// server; nothing of the API server itself is replaced.
var faults struct {
	sync.Mutex
	rules map[[2]string]bool
}

// failRequests makes the operator's requests of method whose path contains
// part fail with 503 until the test ends.
func failRequests(t *testing.T, method, part string) {
	faults.Lock()
	if faults.rules == nil {
		faults.rules = map[[2]string]bool{}
	}
	faults.rules[[2]string{method, part}] = true
	faults.Unlock()
	t.Cleanup(func() {
		faults.Lock()
		delete(faults.rules, [2]string{method, part})
		faults.Unlock()
	})
}

func injectedFault(r *http.Request) *http.Response {
	faults.Lock()
	defer faults.Unlock()
	for rule := range faults.rules {
		if r.Method == rule[0] && strings.Contains(r.URL.Path, rule[1]) {
			body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}`
			return &http.Response{
				StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": []string{"application/json"}},
				Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r,
			}
		}
	}
	return nil
}

// operatorWritesSince returns the operator's write requests after the first
// n whose path contains part, and the count to pass next time.
func operatorWritesSince(n int, part string) ([]string, int) {
	operatorWriteLog.Lock()
	defer operatorWriteLog.Unlock()
	var out []string
	for _, r := range operatorWriteLog.requests[n:] {
		if strings.Contains(r, part) {
			out = append(out, r)
		}
	}
	return out, len(operatorWriteLog.requests)
}

func countWrites(rt http.RoundTripper) http.RoundTripper { return writeCounter{next: rt} }

// restartOperator stops the running operator and starts a new one.
func restartOperator(t *testing.T) {
	t.Helper()
	operatorMu.Lock()
	stopOperator()
	operatorMu.Unlock()
	require.NoError(t, startOperator())
}

var inputs sync.Once

// newEnv returns an environment with one component per name. The first call
// registers the sources of the binaries the local node runs and the charts
// the deployer loads as this package's test inputs.
func newEnv(name string, components ...petriv1.Component) *petriv1.EphemeralEnvironment {
	inputs.Do(func() {
		if err := controlplane.RegisterInputs("deployer", "cmd/petri-deployer", "tests/cmd", "local/node", "examples/charts", "examples/app"); err != nil {
			panic(err)
		}
	})
	return &petriv1.EphemeralEnvironment{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name},
		Spec:       petriv1.EphemeralEnvironmentSpec{Components: components},
	}
}

func get(t *testing.T, name string) *petriv1.EphemeralEnvironment {
	t.Helper()
	e := &petriv1.EphemeralEnvironment{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, e))
	return e
}

// current reads an environment for polling; nil when it cannot be read.
func current(name string) *petriv1.EphemeralEnvironment {
	e := &petriv1.EphemeralEnvironment{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, e); err != nil {
		return nil
	}
	return e
}

func conditionIs(e *petriv1.EphemeralEnvironment, typ string, status metav1.ConditionStatus, reason string) bool {
	c := apimeta.FindStatusCondition(e.Status.Conditions, typ)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == e.Generation
}

func waitFor(t testing.TB, name string, what string, cond func(*petriv1.EphemeralEnvironment) bool) *petriv1.EphemeralEnvironment {
	t.Helper()
	var last *petriv1.EphemeralEnvironment
	ok := eventually(90*time.Second, func() bool {
		last = current(name)
		return last != nil && cond(last)
	})
	if !ok {
		require.FailNowf(t, "environment never reached the state", "%s: %s; last status: %s", name, what, describe(last))
	}
	return last
}

func waitGone(t testing.TB, obj client.Object) {
	t.Helper()
	ok := eventually(90*time.Second, func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err)
	})
	if !ok {
		state := ""
		if e, isEnv := obj.(*petriv1.EphemeralEnvironment); isEnv {
			state = describe(current(e.Name))
		}
		require.FailNowf(t, "object never went away", "%T %s still exists %s", obj, client.ObjectKeyFromObject(obj), state)
	}
}

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := testClock.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if testClock.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

func describe(e *petriv1.EphemeralEnvironment) string {
	if e == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "gen=%d observed=%d phase=%s ns=%s", e.Generation, e.Status.ObservedGeneration, e.Status.Phase, e.Status.TargetNamespace)
	for _, c := range e.Status.Conditions {
		fmt.Fprintf(&b, " [%s=%s %s: %s]", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, c := range e.Status.Components {
		fmt.Fprintf(&b, " {%s %s job=%s err=%s msg=%s}", c.Name, c.Phase, c.Job, c.LastError, c.Message)
	}
	return b.String()
}
