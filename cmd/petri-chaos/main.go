// Command petri-chaos injects faults into Petri running on this machine and
// checks that it keeps its invariants (package local/chaos): it starts the
// local stack (control plane, local node, Petri installed from config/, the
// GitHub stand-in, a real Gitea and the GitLab stand-in, two workload clusters), plays every scenario, prints a table of scenario, faults
// injected, environments and violations of each invariant, and with -out
// writes that table into docs/reliability.md. It exits 1 on any violation.
//
// make chaos builds bin/ and runs it at full size.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/petri-dev/petri/local/chaos"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "petri-chaos:", err)
		os.Exit(1)
	}
}

func run() error {
	root, _ := controlplane.RepoRoot()
	fs := flag.NewFlagSet("petri-chaos", flag.ExitOnError)
	size := fs.String("size", string(chaos.Full), "full (make chaos) or short (the version make test runs)")
	seed := fs.Int64("seed", 0, "seed of the random moments and choices (0: a new one, printed)")
	out := fs.String("out", "", "write the result into this Markdown file (make chaos: docs/reliability.md)")
	only := fs.String("scenarios", "", "comma-separated scenario numbers to run (default: all)")
	bin := fs.String("bin", filepath.Join(root, "bin"), "directory holding petri-operator, petri-sync, petri-deployer, petri-example-app and kubectl")
	dir := fs.String("dir", filepath.Join(root, ".petri-local", "chaos"), "directory of the run: control plane, pods, logs (emptied first)")
	_ = fs.Parse(os.Args[1:])

	sz, err := chaos.ParseSize(*size)
	if err != nil {
		return err
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_007
	}
	var numbers []int
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > chaos.NumScenarios() {
			return fmt.Errorf("-scenarios: %q is not a scenario number (1-%d)", s, chaos.NumScenarios())
		}
		numbers = append(numbers, n)
	}

	// The suite's watches report through their own progress lines.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.RemoveAll(*dir); err != nil {
		return err
	}
	source := filepath.Join(*dir, "config-source")
	if err := chaos.ConfigRepo(source, chaos.Forges...); err != nil {
		return err
	}
	bins := map[string]string{}
	for _, b := range []string{stack.BinOperator, stack.BinSync, stack.BinDeployer, stack.BinExampleApp, stack.BinKubectl} {
		bins[b] = filepath.Join(*bin, b)
	}
	report := stack.NewReport(os.Stdout)
	report.Section("Starting Petri on this machine (%s)", *dir)
	st, err := stack.Start(ctx, stack.Options{
		Dir: filepath.Join(*dir, "run"), Binaries: bins, IngressAddress: "localhost:0",
		ConfigSource: source, Report: report, Forges: chaos.Forges, Clusters: chaos.Clusters,
	})
	if err != nil {
		return err
	}
	defer st.Stop()

	report.Section("Fault injection, %s size, seed %d", sz, *seed)
	res, err := chaos.Run(ctx, st, chaos.Options{Size: sz, Seed: *seed, Log: os.Stdout, Scenarios: numbers})
	if err != nil {
		return err
	}
	fmt.Println()
	chaos.WriteTable(os.Stdout, res)
	if *out != "" {
		if err := chaos.WriteDoc(*out, res); err != nil {
			return err
		}
		fmt.Println("wrote", *out)
	}
	fmt.Println("logs of every pod:", st.LogDir())
	if res.Failed() {
		return errors.New("invariants violated or scenarios not carried out")
	}
	return nil
}
