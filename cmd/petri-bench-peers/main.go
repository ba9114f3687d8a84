// Command petri-bench-peers measures Petri beside Argo CD's ApplicationSet
// pull-request generator on the local control plane (make bench-peers):
// the same pull requests, opened, pushed to and closed at once, delivered
// to both; it prints a table and, with -write, rewrites its section of
// docs/benchmarks.md. See local/peers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/petri-dev/petri/local/peers"
)

func main() {
	// The local node runs Petri's deployer through this command, to count
	// the CPU time of its Jobs' processes.
	if len(os.Args) >= 4 && os.Args[1] == peers.CountedCommand {
		os.Exit(peers.RunCounted(os.Args[2], os.Args[3], os.Args[4:]))
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "petri-bench-peers:", err)
		os.Exit(1)
	}
}

func run() error {
	o := peers.Defaults()
	bin := flag.String("bin", "bin", "directory holding argocd, helm and argocd-manifests (make bench-peers builds them)")
	dir := flag.String("dir", "", "keep the control plane, the configuration and every process's log here (default: a temporary directory, removed)")
	sizes := flag.String("sizes", peers.FormatCounts(o.Sizes), "pull requests opened at once, comma-separated runs")
	write := flag.String("write", "", "rewrite this markdown file's section between the peers markers (docs/benchmarks.md) with the figures")
	flag.DurationVar(&o.Timeout, "timeout", o.Timeout, "longest wait of one phase (opened, pushed, closed) of one size")
	flag.Parse()
	var err error
	if o.Sizes, err = peers.ParseCounts(*sizes); err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	if len(o.Sizes) == 0 {
		return errors.New("-sizes: no size")
	}
	o.Bin, o.Dir, o.Log = *bin, *dir, os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := peers.Run(ctx, o)
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
