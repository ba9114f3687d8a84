// Command petri-sync turns pull requests into EphemeralEnvironments.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	fs := flag.NewFlagSet("petri-sync", flag.ContinueOnError)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "petri-sync: not implemented yet")
}
