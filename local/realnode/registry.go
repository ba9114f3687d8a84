package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// hostsTOML tells containerd to pull from the node's registry over plain
// HTTP (containerd's certs.d/<host:port>/hosts.toml).
const hostsTOML = `server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`

// startRegistry serves an in-process OCI registry (go-containerregistry's
// pkg/registry, in memory) on the host end of the node's link, where
// containerd in the node reaches it as it reaches the API server, and
// writes its hosts.toml for containerd. It does nothing unless
// Options.Registry asked for one.
func (n *Node) startRegistry(context.Context) error {
	if !n.withRegistry {
		return nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(n.HostIP, "0"))
	if err != nil {
		return fmt.Errorf("node registry: %w", err)
	}
	n.Registry = l.Addr().String()
	dir := filepath.Join(n.Dir, "containerd", "certs.d", n.Registry)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		_ = l.Close()
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(fmt.Sprintf(hostsTOML, n.Registry)), 0o644); err != nil {
		_ = l.Close()
		return err
	}
	n.registry = &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	srv := n.registry
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "realnode: registry:", err)
		}
	}()
	return nil
}

// stopRegistry stops the registry's server; what it held goes with it.
func (n *Node) stopRegistry() {
	if n.registry == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = n.registry.Shutdown(ctx)
}
