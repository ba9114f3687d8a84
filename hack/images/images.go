// Package images is the one recipe for Petri's container images: the
// operator's, sync's and the deployer's, the example application's and the
// real node's pause image. Each is a static Go program (CGO off, built with
// the Go toolchain) on an empty base, run as the non-root user 65532:65532,
// with no shell and no package manager. Users build them with `make images`
// (cmd/petri-images) and local/realnode builds and pushes the same ones, so
// there is no second description (a Dockerfile) that could drift from this
// one.
package images

import (
	"fmt"
	"path"
	"slices"
)

// User is the user and group every image runs as.
const User = "65532:65532"

// Spec describes one image: the Go package whose binary is its entrypoint
// and what else the image holds.
type Spec struct {
	// Name is the image's repository name under the registry.
	Name string
	// Package is the Go package built into the image's binary, relative to
	// the module root.
	Package string
	// Binary is the binary's path in the image; its entrypoint.
	Binary string
	// Env is the image's environment beyond PATH.
	Env []string
	// Trees are directories of the repository copied into the image (path
	// in the image to directory in the repository), modes kept.
	Trees map[string]string
	// CACerts says whether the image carries CA certificates (at
	// /etc/ssl/certs/ca-certificates.crt) for the hosts it talks to over
	// TLS: forges, git hosts, chart repositories, registries.
	CACerts bool
	// Description is the image's org.opencontainers.image.description.
	Description string
}

// CACertsPath is where an image's CA certificates are, as in Debian.
const CACertsPath = "/etc/ssl/certs/ca-certificates.crt"

// Source is the repository named in every image's labels.
const Source = "https://github.com/petri-dev/petri"

// Specs are Petri's images. The operator starts petri-deployer's binary in
// every Job; charts under /charts can be referenced by path (repository:
// /charts); Helm's caches go to the Job's writable /tmp (HOME).
var Specs = []Spec{
	{
		Name: "petri-operator", Package: "./cmd/petri-operator", Binary: "/petri-operator", CACerts: true,
		Description: "Petri's operator: environments, namespaces, deploy Jobs, shared workloads",
	},
	{
		Name: "petri-sync", Package: "./cmd/petri-sync", Binary: "/petri-sync", CACerts: true,
		Description: "Petri's sync: pull requests to EphemeralEnvironments, webhooks, statuses and comments",
	},
	{
		Name: "petri-deployer", Package: "./cmd/petri-deployer", Binary: "/petri-deployer", CACerts: true,
		Env:         []string{"HOME=/tmp"},
		Trees:       map[string]string{"/charts": "examples/charts"},
		Description: "Petri's deployer: the Helm install, upgrade or uninstall of one release, run in a Job",
	},
	{
		Name: "example-app", Package: "./examples/app", Binary: "/petri-example-app",
		Description: "Petri's example application (examples/app): serve, store, provision, deprovision",
	},
	{
		Name: "pause", Package: "./local/realnode/pause", Binary: "/pause",
		Description: "The real node's pod sandbox: holds a pod's namespaces, reaps children",
	},
}

// Names are the names of Specs, in order.
func Names() []string {
	names := make([]string, len(Specs))
	for i, s := range Specs {
		names[i] = s.Name
	}
	return names
}

// Lookup returns the spec named name.
func Lookup(name string) (Spec, error) {
	i := slices.IndexFunc(Specs, func(s Spec) bool { return s.Name == name })
	if i < 0 {
		return Spec{}, fmt.Errorf("no image %q (images: %v)", name, Names())
	}
	return Specs[i], nil
}

// Entrypoint is the image's entrypoint: the binary alone, so a pod's args
// are its arguments (the example application serves without any).
func (s Spec) Entrypoint() []string {
	return []string{s.Binary}
}

// Labels are the image's OCI annotations as labels.
func (s Spec) Labels(version string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       s.Name,
		"org.opencontainers.image.description": s.Description,
		"org.opencontainers.image.source":      Source,
	}
	if version != "" {
		l["org.opencontainers.image.version"] = version
	}
	return l
}

// binaryName is the file go build writes for the spec's package.
func (s Spec) binaryName() string {
	return path.Base(s.Package)
}
