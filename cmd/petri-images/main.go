// Command petri-images builds Petri's images from the one recipe in
// hack/images: petri-operator, petri-sync, petri-deployer, example-app and
// pause, static Go programs on an empty base run as 65532:65532. It needs
// only the Go toolchain: no Docker engine, no base image to pull.
//
//	petri-images -o bin/images                      an OCI image layout
//	petri-images -tar bin/images.tar                one tarball for docker load
//	petri-images -push ghcr.io/petri-dev -tag v0.1.0
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/petri-dev/petri/hack/images"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "petri-images:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		layoutDir = flag.String("o", "", "write the images into an OCI image layout in this directory")
		tarFile   = flag.String("tar", "", "write the images into one tarball (docker load, ctr images import)")
		push      = flag.String("push", "", "push the images to this registry (host[:port][/path])")
		registry  = flag.String("registry", "ghcr.io/petri-dev", "the registry the images are named under in -o and -tar (-push names them under its own)")
		tag       = flag.String("tag", "v0.1.0", "the images' tag, also their version label")
		insecure  = flag.Bool("insecure", false, "push over plain HTTP")
		only      = flag.String("only", "", "comma-separated images to build (default all: "+strings.Join(images.Names(), ",")+")")
		caCerts   = flag.String("ca-certificates", images.CACertsPath, "the CA bundle put into the images that talk TLS")
		compile   = flag.Bool("compile", false, "only compile the images' Go packages as a build does, filling Go's build cache, and write no image")
	)
	flag.Parse()
	if *compile && (*layoutDir != "" || *tarFile != "" || *push != "") {
		return fmt.Errorf("-compile writes no image: drop -o, -tar and -push")
	}
	if !*compile && *layoutDir == "" && *tarFile == "" && *push == "" {
		return fmt.Errorf("say where the images go: -o DIR, -tar FILE or -push REGISTRY (or -compile)")
	}
	specs := images.Specs
	if *only != "" {
		specs = nil
		for _, n := range strings.Split(*only, ",") {
			s, err := images.Lookup(strings.TrimSpace(n))
			if err != nil {
				return err
			}
			specs = append(specs, s)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	if *compile {
		if err := images.Compile(ctx, specs, images.Options{}); err != nil {
			return err
		}
		fmt.Printf("compiled the packages of %d images in %s\n", len(specs), time.Since(start).Round(time.Millisecond))
		return nil
	}
	built, err := images.Build(ctx, specs, images.Options{CACerts: *caCerts, Version: *tag})
	if err != nil {
		return err
	}
	fmt.Printf("built %d images in %s\n", len(built), time.Since(start).Round(time.Millisecond))
	if *layoutDir != "" {
		if err := images.WriteLayout(*layoutDir, *registry, *tag, built); err != nil {
			return err
		}
	}
	if *tarFile != "" {
		if err := images.WriteTarball(*tarFile, *registry, *tag, built); err != nil {
			return err
		}
	}
	if *push != "" {
		if err := images.Push(ctx, *push, *tag, *insecure, built); err != nil {
			return err
		}
	}
	for _, b := range built {
		size, err := images.Size(b.Image)
		if err != nil {
			return err
		}
		digest, err := b.Image.Digest()
		if err != nil {
			return err
		}
		fmt.Printf("%-16s %s %6.1f MiB\n", b.Spec.Name, digest, float64(size)/(1<<20))
	}
	return nil
}
