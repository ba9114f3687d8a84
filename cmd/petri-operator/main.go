// Command petri-operator reconciles EphemeralEnvironments and SharedWorkloads.
// It runs every Helm operation as a Job and never touches source control.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/petri-dev/petri/controllers"
)

func main() {
	opts := controllers.DefaultOptions()
	fs := flag.NewFlagSet("petri-operator", flag.ContinueOnError)
	opts.BindFlags(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "petri-operator:", err)
		os.Exit(1)
	}
}

func run(opts controllers.Options) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := controllers.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
