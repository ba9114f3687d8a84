package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/petri-dev/petri/tests/cluster"
	"github.com/petri-dev/petri/tests/e2e"
)

var stack *e2e.Stack

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "petri-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	keep := os.Getenv("PETRI_KEEP_CLUSTER_DIR") != ""
	defer func() {
		if !keep {
			_ = os.RemoveAll(dir)
		}
	}()
	bins, err := cluster.Build(filepath.Join(dir, "bin"), "./cmd/petri-operator", "./cmd/petri-sync", "./cmd/petri-deployer", "./examples/app")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	assets, err := cluster.AssetsDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	report := e2e.NewReport(os.Stderr)
	stack, err = e2e.Start(context.Background(), e2e.Options{
		Dir: filepath.Join(dir, "run"),
		Binaries: map[string]string{
			e2e.BinOperator:   bins["petri-operator"],
			e2e.BinSync:       bins["petri-sync"],
			e2e.BinDeployer:   bins["petri-deployer"],
			e2e.BinExampleApp: bins["app"],
			e2e.BinKubectl:    filepath.Join(assets, "kubectl"),
		},
		IngressAddress: "localhost:0",
		Report:         report,
	})
	if err != nil {
		keep = true
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintln(os.Stderr, "kept for inspection:", dir)
		return 1
	}
	defer stack.Stop()
	code := m.Run()
	if code != 0 {
		keep = true
		fmt.Fprintf(os.Stderr, "logs of every pod: %s\n", stack.LogDir())
	}
	return code
}

func TestStackStarts(t *testing.T) {
	out, err := stack.Kubectl(context.Background(), "get", "pods", "-A")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
}

func TestScenario(t *testing.T) {
	sc := &e2e.Scenario{Stack: stack, Report: e2e.NewReport(os.Stderr)}
	res, err := sc.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
}
