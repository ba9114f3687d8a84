// Command kubectl-petri is the kubectl plugin of Petri: put it on PATH and
// run kubectl petri get, logs, redeploy or open. It only wires the command
// of package plugin to the terminal.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/petri-dev/petri/cmd/kubectl-petri/internal/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := plugin.Execute(ctx, plugin.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
	stop()
	os.Exit(code)
}
