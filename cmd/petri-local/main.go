// Command petri-local runs Petri end to end on this machine: a real local
// control plane, a local node that runs pods as processes (or, with -node
// real, a kubelet running Petri's images in containers), Petri installed
// from config/ as in a cluster, a git config repository and a stand-in for
// the GitHub API. With -clusters 3 it also runs the workload clusters east
// and west, registered in the management cluster.
//
//	petri-local demo    plays a pull request's life (open, push, close),
//	                    checks every step and exits 0 only if all passed
//	petri-local run     starts the same stack and keeps it running
//	petri-local pr open [--title T] [NUMBER] | pr push NUMBER | pr close NUMBER
//	                    plays GitHub against a running "petri-local run"
//
// make demo and make run build the binaries into bin/ and call it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/local/stack"
)

const usage = `usage:
  petri-local demo [flags]                 play a pull request's life and check every step
  petri-local run [flags]                  start Petri on this machine and keep it running
  petri-local pr open [--title T] [NUMBER] open a pull request against a running "run"
  petri-local pr push NUMBER               push a new commit to it
  petri-local pr close NUMBER              close it
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "demo":
		err = demo(os.Args[2:])
	case "run":
		err = run(os.Args[2:])
	case "pr":
		err = pr(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "petri-local:", err)
		os.Exit(1)
	}
}

// common are the flags of demo and run.
type common struct {
	dir, bin, ingress, config, install, database, forge, node string
	clusters                                                  int
}

func (c *common) bind(fs *flag.FlagSet, dirName string) {
	root, _ := controlplane.RepoRoot()
	fs.StringVar(&c.dir, "dir", filepath.Join(root, ".petri-local", dirName), "directory of this run: control plane, pods, logs, config repository (emptied first)")
	fs.StringVar(&c.bin, "bin", filepath.Join(root, "bin"), "directory holding petri-operator, petri-sync, petri-deployer, petri-example-app and kubectl")
	fs.StringVar(&c.ingress, "ingress", stack.DefaultIngressAddress, "address serving the cluster's Ingress rules (environment URLs, the webhook)")
	fs.StringVar(&c.database, "database", "store", "the shared workload the demo application binds to: store (the example application's stand-in) or postgres (a PostgreSQL server, examples/postgres; needs PostgreSQL installed)")
	fs.StringVar(&c.install, "install", stack.InstallKustomize, "how Petri is installed: "+stack.InstallKustomize+" (kubectl apply -k config/default) or "+stack.InstallChart+" (helm install charts/petri)")
	fs.StringVar(&c.forge, "forge", stack.ForgeGitHub, "where the demo's pull request is: "+stack.ForgeGitHub+" (the GitHub API stand-in) or "+stack.ForgeGitea+" (a real Gitea; make gitea builds it)")
	fs.StringVar(&c.node, "node", stack.NodeProcess, "what runs the pods: "+stack.NodeProcess+" (every pod a process of this machine) or "+stack.NodeReal+" (kubelet, containerd and runc with Petri's images; root, make node)")
	fs.IntVar(&c.clusters, "clusters", 1, "how many clusters run: 1 is the management cluster alone; 3 adds the workload clusters east and west, each its own control plane and node, registered as WorkloadClusters (docs/clusters.md)")
	c.config = filepath.Join(root, "examples", "app", "config-repo")
}

// startReported starts the stack with a report on standard output, as demo
// and run both do.
func (c *common) startReported(ctx context.Context) (*stack.Stack, *stack.Report, error) {
	report := stack.NewReport(os.Stdout)
	report.Section("Starting Petri on this machine (%s)", c.dir)
	s, err := c.start(ctx, report)
	return s, report, err
}

func (c *common) start(ctx context.Context, report *stack.Report) (*stack.Stack, error) {
	if err := os.RemoveAll(c.dir); err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for _, b := range []string{stack.BinOperator, stack.BinSync, stack.BinDeployer, stack.BinExampleApp, stack.BinKubectl} {
		bins[b] = filepath.Join(c.bin, b)
	}
	opts := stack.Options{Dir: c.dir, Binaries: bins, IngressAddress: c.ingress, ConfigSource: c.config, Install: c.install, Report: report, Forge: c.forge, Node: c.node, Clusters: c.clusters}
	switch c.database {
	case "store":
	case "postgres":
		for _, b := range []string{stack.BinPostgres, stack.BinPostgresTools, stack.BinPostgresNotes} {
			bins[b] = filepath.Join(c.bin, b)
		}
		if err := stack.WithPostgres(&opts, bins); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("--database %q: want store or postgres", c.database)
	}
	return stack.Start(ctx, opts)
}

func demo(args []string) error {
	fs := flag.NewFlagSet("petri-local demo", flag.ExitOnError)
	var c common
	c.bind(fs, "demo")
	number := fs.Int("number", 1, "the pull request's number")
	timeout := fs.Duration("step-timeout", 3*time.Minute, "longest wait for one step")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, report, err := c.startReported(ctx)
	if err != nil {
		return err
	}
	defer s.Stop()
	if c.forge == stack.ForgeGitea {
		res, err := (&stack.GiteaScenario{Stack: s, Report: report, StepTimeout: *timeout}).Run(ctx)
		stack.WriteGiteaSummary(os.Stdout, res, err)
		s.WriteLogIndex(os.Stdout)
		if err != nil {
			return errors.New("demo failed")
		}
		return nil
	}
	if c.forge == stack.ForgeGitLab {
		res, err := (&stack.GitLabScenario{Stack: s, Report: report, StepTimeout: *timeout}).Run(ctx)
		stack.WriteGitLabSummary(os.Stdout, res, err)
		s.WriteLogIndex(os.Stdout)
		if err != nil {
			return errors.New("demo failed")
		}
		return nil
	}
	if c.database == "postgres" {
		res, err := (&stack.PostgresScenario{Stack: s, Report: report, StepTimeout: *timeout}).Run(ctx)
		stack.WritePostgresSummary(os.Stdout, res, err)
		s.WriteLogIndex(os.Stdout)
		if err != nil {
			return errors.New("demo failed")
		}
		return nil
	}
	res, err := (&stack.Scenario{Stack: s, Report: report, Number: *number, StepTimeout: *timeout}).Run(ctx)
	stack.WriteSummary(os.Stdout, res, err)
	s.WriteLogIndex(os.Stdout)
	if err != nil {
		return errors.New("demo failed")
	}
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("petri-local run", flag.ExitOnError)
	var c common
	c.bind(fs, "run")
	fs.StringVar(&c.config, "config", c.config, "directory the git config repository is made from")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, _, err := c.startReported(ctx)
	if err != nil {
		return err
	}
	defer s.Stop()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	if err := os.WriteFile(controlFile(c.dir), []byte(l.Addr().String()), 0o600); err != nil {
		return err
	}
	defer os.Remove(controlFile(c.dir))

	self := filepath.Join(c.bin, "petri-local")
	kubectl := filepath.Join(c.bin, stack.BinKubectl)
	fmt.Printf(`
Petri is running on this machine. Ctrl-C stops it.

  kubeconfig     export KUBECONFIG=%s
                 %s get ee,sw -n %s
  kubectl petri  export PATH=%s:$PATH   (kubectl and its plugin kubectl-petri)
                 kubectl petri get                         every environment as a tree
                 kubectl petri logs ENV [COMPONENT] [-f]   the log of a component's latest Job
                 kubectl petri redeploy ENV                deploy every component again
                 kubectl petri open ENV                    print its URL
  webhook URL    %s   (secret: %s)
  web page       %s/   (every environment, live)
  read API       %s/api/v1/environments
  config repo    %s   (commit to it; sync fetches it every minute)
  GitHub         %s   (a local stand-in; repository %s)

  Play GitHub (each sends the signed webhook GitHub would send):
    %s pr open [--title "Add a greeting"] [NUMBER]
    %s pr push NUMBER
    %s pr close NUMBER
`, s.Kubeconfig(), kubectl, stack.ManagementNamespace, c.bin, s.WebhookURL, filepath.Join(s.Overlay, "webhook-secret"),
		s.IngressURL, s.IngressURL, s.ConfigRepo, s.GitHub.URL, stack.DemoRepository, self, self, self)
	workload := s.WorkloadClusters()
	if len(workload) > 0 {
		fmt.Printf("\n  Workload clusters (%s get workloadclusters -n %s):\n", kubectl, stack.ManagementNamespace)
		for _, name := range slices.Sorted(maps.Keys(workload)) {
			fmt.Printf("    %-6s export KUBECONFIG=%s\n", name, workload[name].Kubeconfig)
		}
	}
	s.WriteLogIndex(os.Stdout)
	<-ctx.Done()
	fmt.Println("\nStopping.")
	return nil
}

func controlFile(dir string) string { return filepath.Join(dir, "control-address") }

func pr(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	action := args[0]
	fs := flag.NewFlagSet("petri-local pr "+action, flag.ExitOnError)
	var c common
	c.bind(fs, "run")
	title := fs.String("title", "", "open: the pull request's title")
	_ = fs.Parse(args[1:])
	number := 0
	if fs.NArg() > 0 {
		n, err := strconv.Atoi(fs.Arg(0))
		if err != nil || n < 1 {
			return fmt.Errorf("NUMBER must be a positive whole number, not %q", fs.Arg(0))
		}
		number = n
	}
	addr, err := os.ReadFile(controlFile(c.dir))
	if err != nil {
		return fmt.Errorf("no running Petri found in %s (start it with make run): %w", c.dir, err)
	}
	out, err := stack.Control(context.Background(), string(addr), action, number, *title)
	if err != nil {
		return err
	}
	fmt.Println(out)
	fmt.Printf("watch it: %s --kubeconfig %s get ee -n %s -w\n", filepath.Join(c.bin, stack.BinKubectl), filepath.Join(c.dir, "cluster", "kubeconfig-admin"), stack.ManagementNamespace)
	return nil
}
