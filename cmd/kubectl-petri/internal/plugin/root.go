// Package plugin is kubectl petri: see and steer Petri's environments from
// the command line. It talks to the API server only, with the user's own
// kubeconfig, context and flags (k8s.io/cli-runtime), so it can see and do
// exactly what the user's RBAC allows.
package plugin

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// DefaultNamespace is the management namespace of a default installation,
// where environments live; -n or PETRI_NAMESPACE name another.
const DefaultNamespace = "petri-system"

// NamespaceEnv names the environment variable that sets the management
// namespace when -n is not given.
const NamespaceEnv = "PETRI_NAMESPACE"

// options is what every subcommand shares: the kubectl flags and the
// clients built from them.
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams

	config    *rest.Config
	client    client.Client
	clientset kubernetes.Interface
	metadata  metadata.Interface
	namespace string
}

// NewCommand returns the kubectl petri command with its subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams}
	cmd := &cobra.Command{
		Use:         "petri",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl petri"},
		Short:       "See and steer Petri's environments",
		Long: `kubectl petri shows Petri's environments (one per pull request) and steers them.

Environments live in Petri's management namespace: petri-system unless -n or
$PETRI_NAMESPACE names another. Every kubectl flag (--kubeconfig, --context,
--as, ...) works as it does for kubectl.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.flags.AddFlags(cmd.PersistentFlags())
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return o.complete() }
	cmd.AddCommand(newGetCommand(o), newLogsCommand(o), newRedeployCommand(o), newSleepCommand(o), newWakeCommand(o), newOpenCommand(o))
	return cmd
}

// Execute runs the command and prints an error the way kubectl does.
func Execute(ctx context.Context, cmd *cobra.Command) int {
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "error:", err)
		return 1
	}
	return 0
}

func (o *options) complete() error {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	o.config = cfg
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := petriv1.AddToScheme(scheme); err != nil {
		return err
	}
	if o.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	if o.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	if o.metadata, err = metadata.NewForConfig(cfg); err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	o.namespace = DefaultNamespace
	if ns := os.Getenv(NamespaceEnv); ns != "" {
		o.namespace = ns
	}
	if o.flags.Namespace != nil && *o.flags.Namespace != "" {
		o.namespace = *o.flags.Namespace
	}
	return nil
}

// environment reads one environment, with an error that says where it looked.
func (o *options) environment(ctx context.Context, name string) (*petriv1.EphemeralEnvironment, error) {
	e := &petriv1.EphemeralEnvironment{}
	if err := o.client.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: name}, e); err != nil {
		return nil, fmt.Errorf("environment %s in namespace %s: %w", name, o.namespace, err)
	}
	return e, nil
}
