// Command petri-operator reconciles EphemeralEnvironments and SharedWorkloads.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	fs := flag.NewFlagSet("petri-operator", flag.ContinueOnError)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "petri-operator: not implemented yet")
}
