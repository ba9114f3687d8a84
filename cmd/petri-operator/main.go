// Command petri-operator reconciles EphemeralEnvironments and SharedWorkloads.
// It runs every Helm operation as a Job and never touches source control.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/internal/redact"
)

func main() {
	opts := controllers.DefaultOptions()
	fs := flag.NewFlagSet("petri-operator", flag.ContinueOnError)
	opts.BindFlags(fs)
	requireFences := fs.Bool("require-fences", true, "wait, not ready, until the admission fences (config/fences) are installed and agree with these flags before starting")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	// What the operator logs (a Job's message, an API server's answer) is
	// redacted of credentials.
	ctrl.SetLogger(redact.Logger(zap.New(zap.UseFlagOptions(&zapOpts))))
	opts.WithoutFences = !*requireFences
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
	ctx := ctrl.SetupSignalHandler()
	if requireFences {
		c, err := client.New(cfg, client.Options{Scheme: controllers.Scheme()})
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		// An installation may start the operator before the API server
		// has stored the fences: it waits, not ready, rather than exit.
		if err := controllers.AwaitFences(ctrl.LoggerInto(ctx, ctrl.Log), c, opts); err != nil {
			return err
		}
	} else {
		ctrl.Log.Info("Running without admission fences (--require-fences=false): only the operator's own code keeps it inside Petri's namespaces, here and in every workload cluster")
	}
	mgr, err := controllers.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
