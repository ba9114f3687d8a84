// Package bench measures Petri on the real local control plane (make bench):
// sync's webhook-to-write latency under load and the GitHub requests of an
// unchanged resync; the operator's create-to-Ready of one environment in
// no-op mode beside the floor (the same API writes issued by a plain
// client); what one deploy Job's process costs beside Helm in-process; and
// many environments created at once, with the real deployer and in no-op
// mode, with the operator's memory, CPU and API requests; and idle
// environments kept for a simulated day (at rest), with the operator of an
// earlier revision beside this checkout's.
//
// The operator runs as its own process (bin/petri-operator, as its
// ServiceAccount, with config/'s RBAC and admission fences), so /proc gives
// its resident memory and CPU time and its metrics endpoint its API
// requests (petri_api_requests_total). No-op mode is an operator whose
// deployer image is NoopDeployerImage, which the local node plays with
// local/bench/cmd/noop-deployer: every Job completes at once and says
// "NoOp" in its termination message; nothing in the operator changes.
package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// Options choose the measurements and their sizes.
type Options struct {
	// Dir holds the control plane, the binaries, the logs and profiles; a
	// temporary directory (removed afterwards) when empty.
	Dir string
	// Log receives progress lines; discarded when nil.
	Log io.Writer
	// Only runs these measurements (sync, resync, overhead, deployer,
	// scale, atrest, health); all when empty.
	Only []string

	SyncLoad SyncLoadOptions
	Resync   ResyncOptions
	// OverheadRuns and DeployerRuns are the repetitions.
	OverheadRuns int
	DeployerRuns int
	// ScaleNoop and ScaleReal are the numbers of environments of the scale
	// runs in each mode.
	ScaleNoop []int
	ScaleReal []int
	// ScaleFloor follows every no-op run with a floor run of the same size
	// (ModeFloor): the operator's writes issued raw, the same Jobs.
	ScaleFloor bool
	// ScaleTimeout bounds each phase (to Ready, to gone) of a scale run.
	ScaleTimeout time.Duration
	// Concurrency is the operator's --concurrency; its default when zero.
	Concurrency int
	// ProfileDir receives the operator's CPU and heap profiles of every
	// scale run when set.
	ProfileDir string
	// AtRest sizes the at-rest measurement.
	AtRest AtRestOptions
	// Health sizes the health watch's measurement at rest (health).
	Health HealthOptions
	// Smoke marks the figures of a smoke run (tiny sizes) as such.
	Smoke bool
}

// Defaults are make bench's sizes: those of the targets.
func Defaults() Options {
	return Options{
		SyncLoad:     SyncLoadOptions{Rate: 50, Duration: 60 * time.Second, Repos: 20, PullRequests: 5, RateLimit: 1_000_000},
		Resync:       ResyncOptions{Repos: 10, PullRequests: 100, Runs: 5},
		OverheadRuns: 20,
		DeployerRuns: 10,
		ScaleNoop:    []int{100, 500, 1000},
		ScaleReal:    []int{100, 500, 1000},
		ScaleFloor:   true,
		ScaleTimeout: 30 * time.Minute,
		AtRest: AtRestOptions{
			Environments:   1000,
			VerifyInterval: time.Minute,
			JobTTL:         6 * time.Minute,
			Window:         2 * time.Minute,
			Before:         AtRestBefore,
			Timeout:        15 * time.Minute,
		},
		Health: HealthOptions{Environments: 1000, Settle: time.Minute, Window: 2 * time.Minute, Timeout: 15 * time.Minute},
	}
}

// Smoke runs every measurement at a tiny size, in about a minute.
func Smoke() Options {
	return Options{
		SyncLoad:     SyncLoadOptions{Rate: 10, Duration: 2 * time.Second, Repos: 2, PullRequests: 2},
		Resync:       ResyncOptions{Repos: 2, PullRequests: 3, Runs: 2},
		OverheadRuns: 2,
		DeployerRuns: 1,
		ScaleNoop:    []int{3},
		ScaleReal:    []int{2},
		ScaleFloor:   true,
		ScaleTimeout: 3 * time.Minute,
		// This checkout's operator only: building another revision's
		// takes minutes.
		AtRest: AtRestOptions{Environments: 3, VerifyInterval: 2 * time.Second, JobTTL: 6 * time.Second, Window: 6 * time.Second, Timeout: 3 * time.Minute},
		// The window outlasts the leader's retry period, so the
		// operator's renewal of its Lease, its one request at rest, falls
		// in it.
		Health: HealthOptions{Environments: 3, Settle: time.Second, Window: controllers.DefaultRetryPeriod + time.Second, Timeout: 3 * time.Minute},
		Smoke:  true,
	}
}

// Results are the figures of one run.
type Results struct {
	Machine  Machine
	Options  Options
	Smoke    bool
	SyncLoad *SyncLoadResult
	Resync   *ResyncResult
	Overhead *OverheadResult
	Deployer *DeployerResult
	Scale    []ScaleResult
	// AtRest holds one result per operator measured: the earlier
	// revision's first, when one was, then this checkout's.
	AtRest []AtRestResult
	// Health holds the health watch's measurement at rest: off, then on.
	Health []HealthResult
	// Took is the whole run's wall time.
	Took time.Duration
}

func (o Options) runs(name string) bool {
	if len(o.Only) == 0 {
		return true
	}
	for _, n := range o.Only {
		if n == name {
			return true
		}
	}
	return false
}

// Run starts the control plane, runs the measurements and returns the
// figures. The at-rest measurement starts a control plane of its own for
// each operator it measures, after the others' has stopped.
func Run(ctx context.Context, o Options) (*Results, error) {
	start := time.Now()
	logf := benchkit.Logger(o.Log)
	dir, done, err := benchkit.WorkDir(o.Dir, "petri-bench-")
	if err != nil {
		return nil, err
	}
	defer done()
	res := &Results{Machine: thisMachine(), Options: o, Smoke: o.Smoke}
	logf("building petri-operator, petri-deployer and the no-op deployer")
	bins, err := buildBinaries(dir)
	if err != nil {
		return nil, err
	}
	if o.runs("sync") || o.runs("resync") || o.runs("deployer") || o.runs("overhead") || o.runs("scale") {
		if err := runShared(ctx, o, dir, bins, res, logf); err != nil {
			return res, err
		}
	}
	if o.runs("atrest") {
		r, err := atRest(ctx, o.AtRest, dir, bins, logf)
		res.AtRest = r
		if err != nil {
			return res, fmt.Errorf("at rest: %w", err)
		}
	}
	if o.runs("health") {
		r, err := health(ctx, o.Health, dir, bins, logf)
		res.Health = r
		if err != nil {
			return res, fmt.Errorf("health at rest: %w", err)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// runShared runs the measurements that share one control plane.
func runShared(ctx context.Context, o Options, dir string, bins map[string]string, res *Results, logf func(string, ...any)) error {
	e, err := startEnv(ctx, dir, bins, logf)
	if err != nil {
		return err
	}
	defer e.stop()
	if o.runs("sync") {
		logf("sync: %d webhooks/s for %s over %d repositories × %d pull requests", o.SyncLoad.Rate, o.SyncLoad.Duration, o.SyncLoad.Repos, o.SyncLoad.PullRequests)
		so := o.SyncLoad
		if o.ProfileDir != "" {
			so.Profile = filepath.Join(o.ProfileDir, "sync.cpu.pprof")
		}
		r, err := e.syncLoad(ctx, so)
		if err != nil {
			return fmt.Errorf("sync load: %w", err)
		}
		res.SyncLoad = &r
		logf("sync: webhook to write p50 %s p99 %s (%d events, %d lost)", ms(r.Latency.Median), ms(r.Latency.P99), r.Events, r.Lost)
	}
	if o.runs("resync") {
		logf("resync: %d repositories × %d open pull requests, %d rounds", o.Resync.Repos, o.Resync.PullRequests, o.Resync.Runs)
		r, err := e.resync(ctx, o.Resync)
		if err != nil {
			return fmt.Errorf("resync: %w", err)
		}
		res.Resync = &r
		logf("resync: %.0f GitHub requests per unchanged resync, %.0f answered 304", r.Requests.Median, r.NotModified.Median)
	}
	if o.runs("deployer") {
		logf("deployer: %d installs and no-op upgrades, as a process and in-process", o.DeployerRuns)
		r, err := e.deployerFloor(ctx, o.DeployerRuns)
		if err != nil {
			return fmt.Errorf("deployer floor: %w", err)
		}
		res.Deployer = &r
		logf("deployer: install %s wall, %s CPU", ms(r.ProcessInstall.Median), ms(r.ProcessInstallCPU.Median))
	}
	if o.runs("overhead") {
		logf("overhead: %d environments one at a time, operator (no-op mode) and floor", o.OverheadRuns)
		r, err := e.overhead(ctx, o.OverheadRuns, o.Concurrency)
		if err != nil {
			return fmt.Errorf("operator overhead: %w", err)
		}
		res.Overhead = &r
		logf("overhead: operator %s, floor %s, ratio %.2f", ms(r.Operator.Median), ms(r.Floor.Median), r.Ratio)
	}
	if o.runs("scale") {
		return runScale(ctx, e, o, res, logf)
	}
	return nil
}

// runScale runs the scale measurements, each no-op run followed by its
// floor run.
func runScale(ctx context.Context, e *env, o Options, res *Results, logf func(string, ...any)) error {
	type run struct {
		mode string
		n    int
	}
	var runs []run
	for _, n := range o.ScaleNoop {
		runs = append(runs, run{ModeNoop, n})
	}
	for _, n := range o.ScaleReal {
		runs = append(runs, run{ModeReal, n})
	}
	for _, r := range runs {
		logf("scale: %d environments, %s", r.n, r.mode)
		sr, err := e.scale(ctx, ScaleOptions{Mode: r.mode, Environments: r.n, Concurrency: o.Concurrency, Timeout: o.ScaleTimeout, ProfileDir: o.ProfileDir})
		if err != nil {
			return fmt.Errorf("scale %d %s: %w", r.n, r.mode, err)
		}
		res.Scale = append(res.Scale, sr)
		logf("scale: %d %s: all Ready %s, all gone %s, operator peak RSS %d MiB, CPU %s %s",
			r.n, r.mode, secs(sr.AllReady), secs(sr.AllGone), sr.PeakRSS>>20, secs(sr.CPU), sr.Error)
		if r.mode != ModeNoop || !o.ScaleFloor {
			continue
		}
		if sr.template == nil {
			return fmt.Errorf("scale %d %s: no deploy Job to copy for the floor run", r.n, r.mode)
		}
		logf("scale: %d environments, %s", r.n, ModeFloor)
		fr, err := e.scaleFloor(ctx, r.n, sr.template, o.ScaleTimeout, o.ProfileDir)
		if err != nil {
			return fmt.Errorf("scale %d %s: %w", r.n, ModeFloor, err)
		}
		res.Scale = append(res.Scale, fr)
		logf("scale: %d %s: all Ready %s %s", r.n, ModeFloor, secs(fr.AllReady), fr.Error)
	}
	return nil
}

func ms(d time.Duration) string   { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// ParseCounts reads the numbers of environments of a comma-separated flag
// (-scale-noop, -scale-real); an empty list is none.
func ParseCounts(s string) ([]int, error) { return benchkit.ParseCounts(s) }

// FormatCounts writes counts as ParseCounts reads them, for a flag's
// default.
func FormatCounts(v []int) string { return benchkit.FormatCounts(v) }
