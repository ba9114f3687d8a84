package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/petri-dev/petri/internal/docscheck"
)

// TestFlags reads the flags of every deployer command from its real
// FlagSet (what run prints for -help) and checks the inventory and the
// docs against them.
func TestFlags(t *testing.T) {
	var flags []string
	for _, cmd := range []string{"deploy", "undeploy", "write-secret", "sleep", "wake", "verify"} {
		var usage bytes.Buffer
		if code := run([]string{cmd, "-help"}, io.Discard, &usage); code != 0 {
			t.Fatalf("%s -help: exit %d: %s", cmd, code, usage.String())
		}
		got := docscheck.UsageFlags(usage.String())
		if len(got) == 0 {
			t.Fatalf("%s -help printed no flags: %s", cmd, usage.String())
		}
		flags = append(flags, got...)
	}
	docscheck.CheckFlags(t, "petri-deployer", flags)
}
