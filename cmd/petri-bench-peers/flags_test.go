package main

import (
	"os"
	"testing"

	"github.com/petri-dev/petri/internal/docscheck"
)

// TestFlags reads petri-bench-peers's flags from its real FlagSet (its -help, printed
// by main in a helper process) and checks its inventory and the docs
// against them.
func TestFlags(t *testing.T) {
	if args, ok := docscheck.HelperArgs(); ok {
		os.Args = append([]string{"petri-bench-peers"}, args...)
		main()
		return
	}
	docscheck.CheckFlags(t, "petri-bench-peers", docscheck.HelpFlags(t, "TestFlags", "-help"))
}
