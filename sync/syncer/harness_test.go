package syncer_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/githubapi"
	"github.com/petri-dev/petri/local/gitlabapi"
	"github.com/petri-dev/petri/sync/api"
	"github.com/petri-dev/petri/sync/config"
	"github.com/petri-dev/petri/sync/configrepo"
	"github.com/petri-dev/petri/sync/metrics"
	"github.com/petri-dev/petri/sync/provider"
	giteaprovider "github.com/petri-dev/petri/sync/provider/gitea"
	ghprovider "github.com/petri-dev/petri/sync/provider/github"
	glprovider "github.com/petri-dev/petri/sync/provider/gitlab"
	"github.com/petri-dev/petri/sync/render"
	"github.com/petri-dev/petri/sync/resolve"
	"github.com/petri-dev/petri/sync/syncer"
	"github.com/petri-dev/petri/sync/webhook"
)

var (
	env       *controlplane.Cluster
	chartRepo *httptest.Server
	ociHost   string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	env, err = controlplane.Start(controlplane.Options{Controllers: []string{"namespace-controller"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()

	chartRepo = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/index.yaml" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, `apiVersion: v1
entries:
  web:
    - {name: web, version: 1.4.0}
    - {name: web, version: 1.4.2}
    - {name: web, version: 1.5.0}
    - {name: web, version: 1.4.3-rc.1}
  worker:
    - {name: worker, version: 2.0.0}
`)
	}))
	defer chartRepo.Close()

	reg := httptest.NewServer(registry.New(registry.Logger(nilLogger())))
	defer reg.Close()
	ociHost = strings.TrimPrefix(reg.URL, "http://")
	for _, tag := range []string{"0.9.0", "0.9.1", "1.0.0"} {
		img, err := random.Image(64, 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ref, err := name.ParseReference(ociHost+"/charts/api:"+tag, name.Insecure)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := remote.Write(ref, img); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

const (
	ghRepo = "acme/shop"
	secret = "s3cret-webhook-key"
)

// appYAML is a complete application for acme/shop: an https chart with a
// constraint, an OCI chart with a constraint, templated values.
func appYAML(extra string) string {
	return fmt.Sprintf(`apiVersion: petri.dev/v1alpha1
kind: Application
name: shop
repository: %s
trigger:
  labels: [preview]
  excludeLabels: [no-preview]
  drafts: false
  baseBranch: '^main$'
components:
  - name: api
    chart:
      repository: oci://%s/charts
      name: api
      version: "^0.9"
    values:
      replicas: 1
    pullRequestValues:
      image:
        tag: "{{ .ShortSHA }}"
      pr: "{{ .Number }}"
      branch: "{{ .BranchSlug }}"
  - name: web
    chart:
      repository: %s
      name: web
      version: "~1.4"
    dependsOn: [api]
    pullRequestValues:
      host: "pr-{{ .Number }}.shop.test"
      title: "{{ .Title }}"
      author: "{{ .Author }}"
      labels: "{{ join \",\" .Labels }}"
      sha: "{{ .SHA }}"
ttl: 72h
url: "https://pr-{{ .Number }}.shop.test"
%s`, ghRepo, ociHost, chartRepo.URL, extra)
}

type harness struct {
	t       *testing.T
	ctx     context.Context
	ns      string
	gh      *githubapi.Server
	git     *git.Repository
	gitDir  string
	s       *syncer.Syncer
	m       *metrics.Metrics
	url     string
	events  chan webhook.Event
	c       client.Client
	commits int
	// clock is sync's, kept across restarts.
	clock *testClock

	o         harnessOptions
	tokenFile string
	// stop ends the running Syncer and its HTTP server.
	stop func()
}

type harnessOptions struct {
	files          map[string]string
	resync         time.Duration
	githubTimeout  time.Duration
	eventQueue     int
	noSyncerEvents bool
	// chartTimeout bounds one chart version resolution.
	chartTimeout time.Duration
	// restConfig, when set, is how the syncer reaches the API server
	// (env.Config with a transport that records requests).
	restConfig *rest.Config
	// forges are more forges, by name, each played by a GitHub stand-in
	// (forges_test.go).
	forges map[string]*githubapi.Server
	// token is the forges' token (in the token file), webhookSecret the
	// webhooks'; ghp_test and secret when empty.
	token, webhookSecret string
	// logs receives sync's log too.
	logs io.Writer
	// commands, when set, stands in for GitHub's command reader, given
	// the GitHub provider's.
	commands func(provider.CommandReader) provider.CommandReader
	// commentPatience is sync's (syncer.Options.CommentPatience);
	// harnessPatience when zero, so that a test sees a state on its way
	// without waiting long.
	commentPatience time.Duration
	// ghClock, when set, makes the GitHub stand-in keep sync's clock.
	ghClock bool
	// gitlab, when set, is the GitLab forge (GitLab's own provider), whose
	// token is gitlabToken.
	gitlab      *gitlabapi.Server
	gitlabToken string
	// giteaURL, when set, is the Gitea forge's root (Gitea's own
	// provider), whose token is giteaToken.
	giteaURL, giteaToken string
}

// harnessPatience is the comment's patience in the tests that set none.
const harnessPatience = 200 * time.Millisecond

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns, err := env.CreateNamespace(ctx, "sync")
	require.NoError(t, err)
	h := &harness{t: t, ctx: ctx, ns: ns, c: env.Client, clock: newTestClock(t)}

	o.token, o.webhookSecret = cmp.Or(o.token, "ghp_test"), cmp.Or(o.webhookSecret, secret)
	ghOpts := githubapi.Options{Tokens: []string{o.token}}
	if o.ghClock {
		ghOpts.Clock = h.clock
	}
	h.gh = githubapi.New(ghOpts)
	t.Cleanup(h.gh.Close)
	h.tokenFile = filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(h.tokenFile, []byte(o.token+"\n"), 0o600))

	h.gitDir = t.TempDir()
	h.git, err = git.PlainInitWithOptions(h.gitDir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	require.NoError(t, err)
	h.commit(o.files)
	h.o = o
	h.start()
	return h
}

// start runs a new Syncer (with a new GitHub provider: nothing in memory
// from one before) on the harness's namespace, GitHub and config
// repository, and waits for its first reconcile.
func (h *harness) start() {
	t, o := h.t, h.o
	ctx, cancel := context.WithCancel(h.ctx)
	timeout := o.githubTimeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	h.m = metrics.New()
	prov, err := ghprovider.New(ghprovider.Options{BaseURL: h.gh.URL, Auth: ghprovider.TokenFile(h.tokenFile), Observer: h.m, HTTPClient: &http.Client{Timeout: timeout}, Clock: h.clock})
	require.NoError(t, err)
	src, err := configrepo.New(configrepo.Options{URL: h.gitDir, Branch: "main"})
	require.NoError(t, err)
	forges := map[string]provider.Provider{}
	for name, srv := range o.forges {
		if forges[name], err = ghprovider.New(ghprovider.Options{BaseURL: srv.URL, Auth: ghprovider.TokenFile(h.tokenFile), Clock: h.clock}); err != nil {
			require.NoError(t, err)
		}
	}
	if o.gitlab != nil {
		if forges[config.ForgeGitLab], err = glprovider.New(glprovider.Options{BaseURL: o.gitlab.URL, Token: o.gitlabToken, Clock: h.clock, HTTPClient: &http.Client{Timeout: timeout}}); err != nil {
			require.NoError(t, err)
		}
	}
	if o.giteaURL != "" {
		if forges[config.ForgeGitea], err = giteaprovider.New(giteaprovider.Options{BaseURL: o.giteaURL, Token: o.giteaToken, Clock: h.clock, HTTPClient: &http.Client{Timeout: timeout}}); err != nil {
			require.NoError(t, err)
		}
	}
	var commands provider.CommandReader
	if o.commands != nil {
		commands = o.commands(prov)
	}
	resync := o.resync
	if resync == 0 {
		resync = time.Hour // tests trigger resyncs themselves
	}
	h.s, err = syncer.New(syncer.Options{
		RESTConfig: cmp.Or(o.restConfig, env.Config), Scheme: controlplane.Scheme(), Namespace: h.ns, Provider: prov, Commands: commands, Forges: forges,
		Resolver: &resolve.Resolver{HTTPClient: chartRepo.Client(), Timeout: o.chartTimeout}, Config: src, ConfigRepository: "acme/petri-config",
		Metrics: h.m, Log: zap.New(zap.UseDevMode(true), zap.WriteTo(io.MultiWriter(testWriter{t}, cmp.Or[io.Writer](o.logs, io.Discard)))),
		ConfigInterval: time.Hour, ResyncInterval: resync, EventQueue: o.eventQueue, Clock: h.clock,
		CommentPatience: cmp.Or(o.commentPatience, harnessPatience),
	})
	require.NoError(t, err)
	done := make(chan struct{})
	s := h.s
	go func() {
		defer close(done)
		_ = s.Start(ctx)
	}()

	var queue chan<- webhook.Event = h.s.Events()
	if o.noSyncerEvents {
		h.events = make(chan webhook.Event, o.eventQueue)
		queue = h.events
	}
	srv := httptest.NewServer(api.Handler(h.s, &webhook.Handler{Secret: []byte(o.webhookSecret), Queue: queue, Metrics: h.m, Clock: h.clock}, h.m))
	h.url = srv.URL
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			srv.Close()
			cancel()
			<-done
		})
	}
	t.Cleanup(h.stop)
	require.Eventually(t, func() bool { return h.s.Ready() == nil }, 20*time.Second, 20*time.Millisecond)
	// The first reconcile after loading the config is done.
	require.Eventually(t, func() bool { return h.reconciles() >= 1 }, 20*time.Second, 10*time.Millisecond)
}

// restart stops the Syncer and starts a new one, as a restarted process or
// a new leader would: everything it knows comes from the API server and
// GitHub.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("SYNC_TEST_LOGS") != "" {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// commit writes files (empty content removes a file) to the config
// repository and commits.
func (h *harness) commit(files map[string]string) string {
	h.t.Helper()
	wt, err := h.git.Worktree()
	require.NoError(h.t, err)
	for p, content := range files {
		full := filepath.Join(h.gitDir, p)
		if content == "" {
			_, err := wt.Remove(p)
			require.NoError(h.t, err)
			continue
		}
		require.NoError(h.t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(h.t, os.WriteFile(full, []byte(content), 0o644))
		_, err := wt.Add(p)
		require.NoError(h.t, err)
	}
	h.commits++
	hash, err := wt.Commit(fmt.Sprintf("change %d", h.commits), &git.CommitOptions{Author: &object.Signature{Name: "test", Email: "test@example.com", When: wall.Now()}, AllowEmptyCommits: true})
	require.NoError(h.t, err)
	return hash.String()
}

// pushConfig commits and sends the config repository's push webhook.
func (h *harness) pushConfig(files map[string]string) {
	h.t.Helper()
	sha := h.commit(files)
	d, err := githubapi.PushEvent("acme/petri-config", "main", sha)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusAccepted, h.send(d))
	require.Eventually(h.t, func() bool {
		rev, _ := h.s.Applications()
		return rev == sha
	}, 10*time.Second, 10*time.Millisecond, "config revision %s not loaded", sha)
}

func (h *harness) send(d githubapi.Delivery) int {
	h.t.Helper()
	resp, err := d.Send(h.ctx, nil, h.url+api.WebhookPath, []byte(h.o.webhookSecret))
	require.NoError(h.t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (h *harness) prEvent(number int, action string) {
	h.t.Helper()
	d, err := h.gh.PullRequestEvent(ghRepo, number, action)
	require.NoError(h.t, err)
	require.Equal(h.t, http.StatusAccepted, h.send(d))
}

func (h *harness) open(pr githubapi.PullRequest) githubapi.PullRequest {
	h.t.Helper()
	out := h.gh.OpenPullRequest(ghRepo, pr)
	h.prEvent(out.Number, "opened")
	return out
}

// deployed opens a pull request that the shop application's trigger
// matches and waits for its environment; it returns the pull request and
// the environment's name.
func (h *harness) deployed() (githubapi.PullRequest, string) {
	h.t.Helper()
	pr := h.open(githubapi.PullRequest{Labels: []string{"preview"}})
	name := envName(pr.Number)
	h.waitEnv(name, nil)
	return pr, name
}

// lastStatus is the last commit status posted on a commit, in any
// context; none when nothing was posted.
func (h *harness) lastStatus(sha string) githubapi.Status {
	sts := h.gh.Statuses(ghRepo, sha)
	if len(sts) == 0 {
		return githubapi.Status{}
	}
	return sts[len(sts)-1]
}

func envName(n int) string { return render.EnvironmentName("shop", ghRepo, n) }

func (h *harness) get(name string) (*petriv1.EphemeralEnvironment, error) {
	var e petriv1.EphemeralEnvironment
	err := h.c.Get(h.ctx, types.NamespacedName{Namespace: h.ns, Name: name}, &e)
	return &e, err
}

// waitEnv waits until the environment exists and cond holds.
func (h *harness) waitEnv(name string, cond func(*petriv1.EphemeralEnvironment) bool) *petriv1.EphemeralEnvironment {
	h.t.Helper()
	var got *petriv1.EphemeralEnvironment
	require.Eventually(h.t, func() bool {
		e, err := h.get(name)
		if err != nil {
			return false
		}
		got = e
		return cond == nil || cond(e)
	}, 15*time.Second, 10*time.Millisecond, "environment %s", name)
	return got
}

func (h *harness) waitGone(name string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		_, err := h.get(name)
		return apierrors.IsNotFound(err)
	}, 15*time.Second, 10*time.Millisecond, "environment %s still exists", name)
}

func (h *harness) reconciles() float64 {
	return testutil.ToFloat64(h.m.Reconciles.WithLabelValues("success")) +
		testutil.ToFloat64(h.m.Reconciles.WithLabelValues("error")) +
		testutil.ToFloat64(h.m.Reconciles.WithLabelValues("rate_limited"))
}

// resyncs counts the passes that took a resync, done or failed.
func (h *harness) resyncs() float64 {
	return testutil.ToFloat64(h.m.Resyncs.WithLabelValues("done")) + testutil.ToFloat64(h.m.Resyncs.WithLabelValues("failed"))
}

// resync runs one resync round and waits until the pass that took it has
// ended, done or failed: a pass already under way when it is asked for (a
// webhook's) ends first, and its end is not the resync's.
func (h *harness) resync() {
	h.t.Helper()
	before := h.resyncs()
	h.s.Resync()
	require.Eventually(h.t, func() bool { return h.resyncs() > before }, 15*time.Second, 5*time.Millisecond)
}

func (h *harness) envCount() int {
	var list petriv1.EphemeralEnvironmentList
	require.NoError(h.t, h.c.List(h.ctx, &list, client.InNamespace(h.ns)))
	return len(list.Items)
}

func values(t *testing.T, e *petriv1.EphemeralEnvironment, component string) map[string]any {
	t.Helper()
	raw, ok := e.Spec.Values[component]
	require.True(t, ok, "spec.values.%s missing", component)
	var v map[string]any
	require.NoError(t, json.Unmarshal(raw.Raw, &v))
	return v
}

func getJSON(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if into != nil && resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(bytes.NewReader(data)).Decode(into))
	}
	return resp.StatusCode
}

func client_key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}
