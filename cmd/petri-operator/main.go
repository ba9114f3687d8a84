// Command petri-operator reconciles EphemeralEnvironments and SharedWorkloads.
// It runs every Helm operation as a Job and never touches source control.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/petri-dev/petri/controllers"
)

func main() {
	opts := controllers.DefaultOptions()
	fs := flag.NewFlagSet("petri-operator", flag.ContinueOnError)
	opts.BindFlags(fs)
	requireFences := fs.Bool("require-fences", true, "refuse to start unless the admission fences (config/fences) are installed and agree with these flags")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(opts, *requireFences); err != nil {
		fmt.Fprintln(os.Stderr, "petri-operator:", err)
		os.Exit(1)
	}
}

func run(opts controllers.Options, requireFences bool) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	if requireFences {
		c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := controllers.VerifyFences(ctx, c, opts); err != nil {
			return err
		}
	} else {
		ctrl.Log.Info("Running without admission fences (--require-fences=false): only the operator's own code keeps it inside Petri's namespaces")
	}
	mgr, err := controllers.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}
