// Package bench_test runs make bench's measurements at tiny sizes (the smoke
// run of cmd/petri-bench -smoke) against the real local control plane, and
// checks that every figure is produced and makes sense. It asserts no
// timing thresholds: the targets are make bench's business.
package bench_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/bench"
	"github.com/petri-dev/petri/local/controlplane"
)

func TestSmoke(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	// The binaries the benchmarks build and the manifests they install.
	require.NoError(t, controlplane.RegisterInputs("local/bench", "cmd/petri-operator", "cmd/petri-deployer", "controllers", "deployer", "sync", "local/node", "config", "examples/charts"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	o := bench.Smoke()
	var progress bytes.Buffer
	o.Log = &progress
	o.Dir = t.TempDir()
	res, err := bench.Run(ctx, o)
	require.NoError(t, err, "progress:\n%s", progress.String())
	t.Log("\n" + progress.String())

	// sync: every webhook was written, and the figures are ordered.
	s := res.SyncLoad
	require.NotNil(t, s)
	assert.Equal(t, int(o.SyncLoad.Duration/(time.Second/time.Duration(o.SyncLoad.Rate))), s.Events)
	assert.Zero(t, s.Lost, "webhooks never written")
	assert.Equal(t, s.Events-s.Superseded, s.Latency.N)
	assert.Positive(t, s.Latency.Median)
	assert.GreaterOrEqual(t, s.Latency.P99, s.Latency.Median)
	assert.Positive(t, s.GitHubRequests)

	// resync: two conditional listings per repository (its open pull
	// requests, its comments since the watermark that finds lost
	// commands), answered 304.
	r := res.Resync
	require.NotNil(t, r)
	assert.Equal(t, float64(2*o.Resync.Repos), r.Requests.Median)
	assert.Equal(t, r.Requests.Max, r.NotModified.Max)
	assert.Zero(t, r.Charged.Max)

	// deployer: the process and in-process figures exist.
	d := res.Deployer
	require.NotNil(t, d)
	for name, v := range map[string]time.Duration{
		"process install": d.ProcessInstall.Median, "process install CPU": d.ProcessInstallCPU.Median,
		"process upgrade": d.ProcessUpgrade.Median, "process upgrade CPU": d.ProcessUpgradeCPU.Median,
		"in-process install": d.InProcessInstall.Median, "in-process upgrade": d.InProcessUpgrade.Median,
	} {
		assert.Positive(t, v, name)
	}
	assert.Positive(t, res.DeployerFloor(500))
	// The bare installs cost the machine more than the process alone (the
	// control plane served them), and an install makes requests: Helm's
	// release records, its Lease, the chart's two objects at least.
	assert.Greater(t, d.BareInstallMachineCPU, d.ProcessInstallCPU.Median/2, "machine CPU of an install without a Job")
	assert.GreaterOrEqual(t, d.BareInstallRequests, 4.0, "kube-apiserver requests of an install without a Job")

	// overhead: both sides ran every time; the floor issued its 11 writes
	// (environment, namespace, ServiceAccount, RoleBinding, 3 Secrets, 3
	// Jobs, status).
	ov := res.Overhead
	require.NotNil(t, ov)
	assert.Equal(t, o.OverheadRuns, ov.Operator.N)
	assert.Equal(t, o.OverheadRuns, ov.Floor.N)
	assert.Equal(t, 11, ov.FloorWrites)
	assert.Positive(t, ov.Ratio)
	assert.GreaterOrEqual(t, ov.Operator.P99, ov.Operator.Median)

	checkScale(t, o, res)
	ar := checkAtRest(t, o, res)
	checkHealth(t, o, res)
	checkReport(t, res, ar)
}

// checkHealth: the health watch was measured off, then on, over the same
// idle environments with their Deployments, which it reads as running: no
// environment left Ready for it.
func checkHealth(t *testing.T, o bench.Options, res *bench.Results) {
	require.Len(t, res.Health, 2)
	for i, h := range res.Health {
		assert.Equal(t, i == 1, h.Watch, "off first, then on")
		assert.Equal(t, o.Health.Environments, h.Environments)
		assert.Equal(t, 3*o.Health.Environments, h.Workloads, "three Deployments per environment")
		assert.Equal(t, map[petriv1.EnvironmentPhase]int{petriv1.EnvironmentReady: o.Health.Environments}, h.Phases, "--workload-health=%t", h.Watch)
		assert.Positive(t, h.RSS)
		assert.Positive(t, h.HeapInuse)
		assert.Positive(t, h.OperatorRequestsPerMinute(), "its Lease at least")
	}
}

// checkScale: every environment came and went; the operator's process was
// measured and counted its requests; no-op mode says so. Each no-op run is
// followed by a floor run of its size.
func checkScale(t *testing.T, o bench.Options, res *bench.Results) {
	require.Len(t, res.Scale, 2*len(o.ScaleNoop)+len(o.ScaleReal))
	for _, sc := range res.Scale {
		assert.Empty(t, sc.Error, "%d %s", sc.Environments, sc.Mode)
		// Every run counted kube-apiserver's requests by resource up to
		// Ready: each environment's three deploy Jobs and their pods.
		assert.InDelta(t, 3.0, sc.APIServerByResource[[2]string{"POST", "jobs"}], 0.01, sc.Mode)
		assert.InDelta(t, 3.0, sc.APIServerByResource[[2]string{"POST", "pods"}], 0.01, sc.Mode)
		assert.Positive(t, sc.APIServerRequests, sc.Mode)
		// The CPU split found the control plane's processes.
		assert.Positive(t, sc.CPUToReady["kube-apiserver"], sc.Mode)
		assert.Positive(t, sc.CPUToReady["etcd"], sc.Mode)
		if sc.Mode != bench.ModeFloor {
			assert.Positive(t, sc.CPUToReady["petri-operator"], sc.Mode)
		}
		// Every environment was timed through each step of its way to
		// Ready, by the same watches in both runs; the steps fit in the
		// whole.
		st := sc.Stages
		n := sc.Environments
		assert.Equal(t, n, st.Ready.N, "created → Ready, %s", sc.Mode)
		assert.Equal(t, n, st.ToFirstJob.N, "created → first Jobs, %s", sc.Mode)
		assert.Equal(t, n, st.DependencyToJob.N, "db done → api Job, %s", sc.Mode)
		assert.Equal(t, n, st.LastPodToReady.N, "last pod → Ready, %s", sc.Mode)
		assert.Equal(t, 3*n, st.JobToPodDone.N, "Job → pod Succeeded, %s", sc.Mode)
		assert.Positive(t, st.DependencyToJob.Median, sc.Mode)
		assert.Less(t, st.ToFirstJob.Max, st.Ready.Max, "the first Jobs before Ready, %s", sc.Mode)
		assert.LessOrEqual(t, st.Ready.Max, sc.AllReady+time.Second, "no environment Ready after the run's last, %s", sc.Mode)
		if sc.Mode == bench.ModeFloor {
			// The floor waits for each Job's Complete before the next step.
			assert.Equal(t, 3*n, st.PodDoneToJobComplete.N, sc.Mode)
		}
		if sc.Mode == bench.ModeFloor {
			assert.Zero(t, sc.NotReady, sc.Mode)
			assert.Positive(t, sc.AllReady, sc.Mode)
			assert.Equal(t, 3*sc.Environments, sc.JobLatency.N, "the floor's deploy Jobs completed")
			continue
		}
		assert.Zero(t, sc.NotReady, sc.Mode)
		assert.Zero(t, sc.NotGone, sc.Mode)
		assert.Positive(t, sc.AllReady, sc.Mode)
		assert.Positive(t, sc.AllGone, sc.Mode)
		assert.Positive(t, sc.PeakRSS, sc.Mode)
		assert.Positive(t, sc.CPU, sc.Mode)
		// Three deploy and three undeploy Jobs per environment, at least.
		assert.GreaterOrEqual(t, sc.ByResource[[2]string{"create", "jobs"}], 6.0, sc.Mode)
		assert.GreaterOrEqual(t, sc.ByResource[[2]string{"create", "namespaces"}], 1.0, sc.Mode)
		assert.Positive(t, sc.Requests["get"], sc.Mode)
		if sc.Mode == bench.ModeNoop {
			assert.True(t, strings.HasPrefix(sc.NoopMessage, "NoOp: "), "no-op Job message %q", sc.NoopMessage)
		} else {
			assert.Empty(t, sc.NoopMessage)
		}
	}
}

// checkAtRest: this checkout's operator kept the environments idle for a
// simulated day. Every one was verified by the no-op deployer's verify,
// verify Jobs started all through the window, and the verified ones did not
// pile up: at most one verify Job per environment, where the TTL alone
// would keep Ratio of them (the operator before 8bc6e04).
func checkAtRest(t *testing.T, o bench.Options, res *bench.Results) bench.AtRestResult {
	require.Len(t, res.AtRest, 1, "the smoke run measures this checkout's operator only")
	ar := res.AtRest[0]
	n := o.AtRest.Environments
	assert.Equal(t, bench.SideAfter, ar.Side)
	assert.NotEmpty(t, ar.Revision)
	assert.Equal(t, n, ar.Verified, "environments whose releases were verified")
	assert.True(t, strings.HasPrefix(ar.VerifyMessage, "NoOp: verify of releases db, api, web"), "no-op verify message %q", ar.VerifyMessage)
	assert.Positive(t, ar.JobsStarted)
	assert.InDelta(t, ar.JobsStarted, ar.PodsStarted, float64(n), "one pod per verify Job (the window may cut between the two)")
	assert.Equal(t, 8, ar.Samples)
	assert.LessOrEqual(t, ar.MaxJobs, n, "Jobs kept")
	assert.LessOrEqual(t, ar.MaxPods, 2*n, "pods kept")
	assert.GreaterOrEqual(t, ar.MaxSecrets, 3*n, "a values Secret per component")
	assert.Less(t, ar.JobsAtProduction(), 1000.0, "Jobs kept per 1,000 environments at the production TTL")
	assert.InDelta(t, 6000, ar.PodsPerHour(), 3000, "a verify Job per environment every 10 minutes")
	assert.Positive(t, ar.RequestsPerSecond())
	assert.Positive(t, ar.OperatorRequests)
	assert.Positive(t, ar.RSS)
	assert.Positive(t, ar.Cores["kube-apiserver"])
	return ar
}

// checkReport: the table and the document.
func checkReport(t *testing.T, res *bench.Results, ar bench.AtRestResult) {
	var table bytes.Buffer
	res.WriteTable(&table)
	for _, want := range []string{"smoke run", "webhook → environment written", "operator overhead", "no-op deployer", "real deployer", bench.ModeFloor, "operator ÷ floor", "(≤ 1.3x)", "per deploy Job: machine CPU", "its floor, Helm without a Job plus a Job with nothing in it", "deploy process without a Job, install", "≤ 2 per event", "at rest, per 1,000 idle environments", "after (" + ar.Revision + ")", "--workload-health=true"} {
		assert.Contains(t, table.String(), want)
	}
	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	require.NoError(t, os.WriteFile(doc, []byte("# Benchmarks\n\nWritten by hand.\n\n"+bench.BeginMarker+"\nold figures\n"+bench.EndMarker+"\n\n## History\n\nKept.\n"), 0o644))
	require.NoError(t, res.UpdateDoc(doc))
	got, err := os.ReadFile(doc)
	require.NoError(t, err)
	assert.Contains(t, string(got), "Written by hand.")
	assert.Contains(t, string(got), "## History\n\nKept.\n")
	assert.NotContains(t, string(got), "old figures")
	assert.Contains(t, string(got), "| 3 × 3 components, no-op deployer |")
	assert.Contains(t, string(got), "| 3, no-op deployer | kube-apiserver ")
	assert.Contains(t, string(got), "| at rest, per 1,000 idle environments | after ("+ar.Revision+") |")
	assert.Contains(t, string(got), "| pods started per hour, scaled from the simulated hour | ")
	assert.Equal(t, 1, strings.Count(string(got), bench.BeginMarker))
}
