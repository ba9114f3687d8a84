package main

import (
	"os"
	"testing"

	"github.com/petri-dev/petri/internal/docscheck"
)

// TestFlags reads the flags of every petri-local command from its real
// FlagSet (its -help, printed by main in a helper process) and checks the
// inventory and the docs against them.
func TestFlags(t *testing.T) {
	if args, ok := docscheck.HelperArgs(); ok {
		os.Args = append([]string{"petri-local"}, args...)
		main()
		return
	}
	var flags []string
	for _, cmd := range [][]string{{"demo"}, {"run"}, {"pr", "open"}} {
		flags = append(flags, docscheck.HelpFlags(t, "TestFlags", append(cmd, "-help")...)...)
	}
	docscheck.CheckFlags(t, "petri-local", flags)
}
