package ui_test

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/sync/render"
)

// The page in a real browser: headless Chromium, driven through the
// DevTools protocol. Chromium is required, never optional: make test
// installs Debian's package when it is missing.

// chromium finds the browser.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	require.FailNow(t, "headless Chromium is required for the page's browser tests and was not found on PATH",
		"install it with: sudo apt-get install -y chromium (make test does so when it runs as root)")
	return ""
}

// browser starts headless Chromium for the test and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		// Chromium's sandbox needs user namespaces or a setuid helper,
		// which neither root in a container nor many CI machines have.
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first action starts the browser, under the test's context.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")), "start headless Chromium")
	return ctx
}

// within waits at most d until the selector matches a visible element and
// returns how long it took.
func within(t *testing.T, ctx context.Context, d time.Duration, selector string) time.Duration {
	t.Helper()
	start := wall.Now()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(selector)))
	took := time.Since(start)
	require.NoError(t, err, "the page did not show %s within %s", selector, d)
	return took
}

// An environment appears on the open page within a second of being written,
// its phase changes there as the API server's does, and it goes when it is
// deleted: all over the one event stream, with no request from the page.
func TestBrowserShowsChangesLive(t *testing.T) {
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(server.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("body.connected")),
	))
	before := requests()

	e := syncEnvironment("shop-pr-21-dddd", 21, greeter("web"), greeter("api", "web"))
	create(t, e)
	appeared := within(t, ctx, time.Second, "#env-shop-pr-21-dddd")
	t.Logf("environment on the page %s after it was written", appeared)
	phase, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#env-shop-pr-21-dddd > header .phase")))
	require.NoError(t, err)
	assert.Equal(t, "Pending", phase)

	setStatus(t, e.Name, func(s *petriv1.EphemeralEnvironmentStatus) {
		s.Phase, s.TargetNamespace = petriv1.EnvironmentDeploying, "shop-pr-21-dddd-4a"
		s.Components = []petriv1.ComponentStatus{
			{Name: "web", Phase: petriv1.ComponentDeploying, Job: "shop-pr-21-dddd-web-deploy-g1-0a1b2c3d"},
			{Name: "api", Phase: petriv1.ComponentPending, Message: "waiting for web"},
		}
	})
	deploying := within(t, ctx, time.Second, `#env-shop-pr-21-dddd[data-phase="Deploying"]`)
	setStatus(t, e.Name, func(s *petriv1.EphemeralEnvironmentStatus) {
		s.Phase = petriv1.EnvironmentReady
		s.Components = []petriv1.ComponentStatus{
			{Name: "web", Phase: petriv1.ComponentDeployed, Job: "shop-pr-21-dddd-web-deploy-g1-0a1b2c3d"},
			{Name: "api", Phase: petriv1.ComponentDeployed, Job: "shop-pr-21-dddd-api-deploy-g1-4e5f6a7b"},
		}
	})
	ready := within(t, ctx, time.Second, `#env-shop-pr-21-dddd[data-phase="Ready"]`)
	t.Logf("phase on the page %s (Deploying) and %s (Ready) after it was written", deploying, ready)
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#env-shop-pr-21-dddd")))
	require.NoError(t, err)
	assert.Contains(t, text, "shop-pr-21-dddd-4a")
	assert.Contains(t, text, "acme/shop #21")
	assert.NotContains(t, text, "waiting for web")

	require.NoError(t, cluster.Client.Delete(context.Background(), e))
	start := wall.Now()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(wctx, chromedp.WaitNotPresent(chromedp.CSS("#env-shop-pr-21-dddd"))), "the deleted environment leaves the page")
	t.Logf("environment off the page %s after its deletion", time.Since(start))
	assert.Equal(t, before, requests(), "the page made no request: every change came over the event stream; it asked for %v", requestedSince(before))
	// The page names its icon, so the browser does not ask for
	// /favicon.ico at a moment of its own choosing (a 404 that, arriving
	// late, was once counted above).
	assert.NotContains(t, requestedSince(0), "/favicon.ico")
}

// startOperator runs the operator in-process as production wires it.
func startOperator(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cfg, err := cluster.ServiceAccountConfig(ctx, mgmtNS, "petri-operator")
	require.NoError(t, err)
	o := controllers.DefaultOptions()
	o.DeployerImage = deployerImage + ":dev"
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.JobBackoffLimit = 0
	mgr, err := controllers.NewManager(cfg, o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
}

func values(v string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(v)} }

// The page with environments the operator deployed (one Ready with a
// shared-workload binding, one Failed with its deployer log open, one
// still deploying), photographed at a desk's and a phone's width. The
// pictures go to docs/ when PETRI_UPDATE_DOCS=1 (make ui-screenshots).
func TestBrowserScreenshots(t *testing.T) {
	ctx := browser(t)
	startOperator(t)
	sw := &petriv1.SharedWorkload{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "postgres",
			Labels: map[string]string{petriv1.LabelManagedBy: render.ManagedBy, render.LabelApplication: render.SharedWorkloadOwner}},
		Spec: petriv1.SharedWorkloadSpec{
			Chart:          petriv1.ChartReference{Repository: imageCharts, Name: "greeter", Version: "0.1.0"},
			Release:        petriv1.ReleaseOptions{Wait: new(false)},
			InstanceSecret: &petriv1.InstanceSecretSpec{Keys: []string{"PASSWORD"}},
			Binding:        map[string]string{"DATABASE": "app_{{ .Hash }}"},
			Provision:      &petriv1.ContainerTemplate{Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"succeed"}},
			Deprovision:    &petriv1.ContainerTemplate{Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"succeed"}},
		},
	}
	create(t, sw)
	api := greeter("api", "web")
	api.Uses = []string{"postgres"}
	ready := syncEnvironment("shop-pr-42-3f9a1c", 42, greeter("web"), api, greeter("worker"))
	ready.Spec.SharedWorkloads = []string{"postgres"}
	strict := petriv1.Component{Name: "api", Chart: petriv1.ChartReference{Repository: imageCharts, Name: "strict", Version: "0.1.0"}, DependsOn: []string{"web"}}
	failed := syncEnvironment("shop-pr-43-8b21d4", 43, greeter("web"), strict)
	failed.Spec.Values = map[string]apiextensionsv1.JSON{"api": values(`{"replicas": 0}`)}
	slow := greeter("web")
	slow.Release = petriv1.ReleaseOptions{Wait: new(true), Timeout: &metav1.Duration{Duration: 5 * time.Minute}}
	deploying := syncEnvironment("shop-pr-44-c07e55", 44, slow)
	for _, e := range []*petriv1.EphemeralEnvironment{ready, failed, deploying} {
		create(t, e)
	}
	waitPhase := func(name string, ok func(*petriv1.EphemeralEnvironment) bool) {
		e := &petriv1.EphemeralEnvironment{}
		require.Eventually(t, func() bool {
			return cluster.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, e) == nil && ok(e)
		}, 3*time.Minute, 100*time.Millisecond, "%s: %+v", name, e.Status)
	}
	waitPhase(ready.Name, func(e *petriv1.EphemeralEnvironment) bool { return e.Status.Phase == petriv1.EnvironmentReady })
	waitPhase(failed.Name, func(e *petriv1.EphemeralEnvironment) bool { return e.Status.Phase == petriv1.EnvironmentFailed })
	waitPhase(deploying.Name, func(e *petriv1.EphemeralEnvironment) bool {
		return len(e.Status.Components) == 1 && e.Status.Components[0].Phase == petriv1.ComponentDeploying
	})

	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(server.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("body.connected")),
		chromedp.WaitVisible(chromedp.CSS(`#env-shop-pr-42-3f9a1c[data-phase="Ready"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#env-shop-pr-43-8b21d4[data-phase="Failed"]`)),
	))
	// The failed component's log is open by itself and shows the deployer's
	// own words, read through the API server.
	logText, err := chromedp.Run(ctx, chromedp.Poll[string](
		`(() => { const p = document.querySelector('#env-shop-pr-43-8b21d4 details.log[open] pre'); return p && p.textContent.includes('"msg"') ? p.textContent : null })()`,
		chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err, "the failed component's log tail appears")
	assert.Contains(t, logText, `"release":"api"`)
	assert.Contains(t, logText, `"level":"ERROR"`)

	dir := t.TempDir()
	if os.Getenv("PETRI_UPDATE_DOCS") != "" {
		dir = filepath.Join(root, "docs")
	}
	desktop, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch)))
	_, err = chromedp.Run(ctx, chromedp.Evaluate[any]("window.scrollTo(0, 0)"))
	require.NoError(t, err)
	phone, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	for _, shot := range []struct {
		file  string
		data  []byte
		width int
	}{{"ui-desktop.png", desktop, 1280}, {"ui-phone.png", phone, 780}} {
		img, err := png.Decode(bytes.NewReader(shot.data))
		require.NoError(t, err, shot.file)
		assert.Equal(t, shot.width, img.Bounds().Dx(), "%s is as wide as the viewport", shot.file)
		path := filepath.Join(dir, shot.file)
		require.NoError(t, os.WriteFile(path, shot.data, 0o644))
		t.Logf("screenshot %s (%dx%d)", path, img.Bounds().Dx(), img.Bounds().Dy())
	}
	width, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.documentElement.scrollWidth"))
	require.NoError(t, err)
	assert.LessOrEqual(t, width, 390, "nothing overflows a phone's width")
}
