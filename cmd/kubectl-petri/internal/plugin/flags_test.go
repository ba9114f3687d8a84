package plugin

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/petri-dev/petri/internal/docscheck"
)

// TestFlagsAndCommands reads kubectl petri's commands and flags (the kubectl
// flags every command takes, and each command's own) from the real command
// tree, and checks the inventories and the docs against them.
func TestFlagsAndCommands(t *testing.T) {
	root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	var flags, cmds []string
	add := func(f *pflag.Flag) {
		flags = append(flags, f.Name)
		if f.Shorthand != "" {
			flags = append(flags, f.Shorthand)
		}
	}
	root.PersistentFlags().VisitAll(add)
	for _, c := range root.Commands() {
		cmds = append(cmds, c.Name())
		cmds = append(cmds, c.Aliases...)
		c.Flags().VisitAll(add)
	}
	docscheck.CheckFlags(t, docscheck.Plugin, flags)
	docscheck.CheckCommands(t, cmds)
}
