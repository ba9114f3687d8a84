package controllers

import (
	"flag"
	"io"
)

// parseOptions is what cmd/petri-operator makes of args: the defaults, the
// flags, the validation.
func parseOptions(args ...string) (Options, error) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("petri-operator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.Validate()
}
