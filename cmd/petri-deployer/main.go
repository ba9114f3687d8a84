// Command petri-deployer runs Helm operations inside Petri's Jobs.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	fs := flag.NewFlagSet("petri-deployer", flag.ContinueOnError)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "petri-deployer: not implemented yet")
}
