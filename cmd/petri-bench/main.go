// Command petri-bench measures Petri on the real local control plane and
// prints a table (make bench): sync's webhook-to-write latency and resync
// cost, the operator's overhead beside the raw-write floor, the deploy
// Job's cost beside Helm in-process, and 100 to 1,000 environments at
// once with the real deployer and in no-op mode, and idle environments
// kept for a simulated day (at rest) with the operator of an earlier
// revision (-atrest-before) beside this checkout's. With -write it also
// rewrites the generated part of docs/benchmarks.md. See local/bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/local/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "petri-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	// -smoke chooses the defaults of every size flag, so it is looked for
	// before the flags are defined.
	o := bench.Defaults()
	for _, a := range os.Args[1:] {
		if a == "-smoke" || a == "--smoke" || a == "-smoke=true" || a == "--smoke=true" {
			o = bench.Smoke()
		}
	}
	fs := flag.CommandLine
	fs.Bool("smoke", false, "run every measurement at a tiny size (seconds), as make test does; the size flags still apply")
	write := fs.String("write", "", "rewrite the generated part of this markdown file (docs/benchmarks.md) with the figures")
	only := fs.String("only", "", "comma-separated measurements to run: sync, resync, deployer, overhead, scale, atrest, health (default all)")
	dir := fs.String("dir", "", "keep the control plane, logs and the operator's logs here (default: a temporary directory, removed)")
	fs.IntVar(&o.SyncLoad.Rate, "sync-rate", o.SyncLoad.Rate, "webhooks per second")
	fs.DurationVar(&o.SyncLoad.Duration, "sync-duration", o.SyncLoad.Duration, "how long webhooks are sent")
	fs.IntVar(&o.SyncLoad.Repos, "sync-repos", o.SyncLoad.Repos, "repositories the webhooks spread over")
	fs.IntVar(&o.SyncLoad.PullRequests, "sync-prs", o.SyncLoad.PullRequests, "open pull requests per repository under load")
	fs.IntVar(&o.Resync.Repos, "resync-repos", o.Resync.Repos, "repositories of the unchanged resync")
	fs.IntVar(&o.Resync.PullRequests, "resync-prs", o.Resync.PullRequests, "open pull requests per repository of the unchanged resync")
	fs.IntVar(&o.Resync.Runs, "resync-runs", o.Resync.Runs, "unchanged resyncs counted")
	fs.IntVar(&o.OverheadRuns, "overhead-runs", o.OverheadRuns, "environments created one at a time, operator and floor each")
	fs.IntVar(&o.DeployerRuns, "deployer-runs", o.DeployerRuns, "installs and no-op upgrades, process and in-process each")
	scaleNoop := fs.String("scale-noop", bench.FormatCounts(o.ScaleNoop), "environments created at once in no-op mode (comma-separated runs; empty for none)")
	scaleReal := fs.String("scale-real", bench.FormatCounts(o.ScaleReal), "environments created at once with the real deployer (comma-separated runs; empty for none)")
	fs.BoolVar(&o.ScaleFloor, "scale-floor", o.ScaleFloor, "follow every no-op scale run with a floor run of the same size: the operator's writes issued raw by a client, the same Jobs, no operator")
	fs.DurationVar(&o.ScaleTimeout, "scale-timeout", o.ScaleTimeout, "longest wait for all Ready, and for all gone, of one scale run")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "the operator's --concurrency (default: the operator's default)")
	fs.IntVar(&o.AtRest.Environments, "atrest-environments", o.AtRest.Environments, "idle environments kept for the simulated day")
	fs.DurationVar(&o.AtRest.VerifyInterval, "atrest-interval", o.AtRest.VerifyInterval, "the operator's --verify-interval at rest, standing in for 10m")
	fs.DurationVar(&o.AtRest.JobTTL, "atrest-ttl", o.AtRest.JobTTL, "the operator's --job-ttl-after-finished at rest, standing in for 24h (144 intervals)")
	fs.DurationVar(&o.AtRest.Window, "atrest-window", o.AtRest.Window, "how long the steady state at rest is read")
	fs.StringVar(&o.AtRest.Before, "atrest-before", o.AtRest.Before, "git revision whose operator is measured at rest beside this checkout's (empty for none)")
	fs.DurationVar(&o.AtRest.Timeout, "atrest-timeout", o.AtRest.Timeout, "longest wait for all Ready at rest")
	fs.IntVar(&o.Health.Environments, "health-environments", o.Health.Environments, "idle environments, each with three Deployments, kept with the health watch off and on")
	fs.DurationVar(&o.Health.Window, "health-window", o.Health.Window, "how long the health watch's cost at rest is read")
	fs.StringVar(&o.ProfileDir, "profile", "", "write the operator's CPU and heap profiles and kube-apiserver's CPU profile of every scale run (and kube-apiserver's of every floor run) into this directory")
	flag.Parse()
	var err error
	if o.ScaleNoop, err = bench.ParseCounts(*scaleNoop); err != nil {
		return fmt.Errorf("-scale-noop: %w", err)
	}
	if o.ScaleReal, err = bench.ParseCounts(*scaleReal); err != nil {
		return fmt.Errorf("-scale-real: %w", err)
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	o.Dir = *dir
	o.Log = os.Stderr
	// sync's engine runs in this process; its logs would drown the table.
	ctrllog.SetLogger(logr.Discard())
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, o)
	if res != nil {
		res.WriteTable(os.Stdout)
	}
	if err != nil {
		return err
	}
	if *write != "" {
		if err := res.UpdateDoc(*write); err != nil {
			return fmt.Errorf("write %s: %w", *write, err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *write)
	}
	return nil
}
