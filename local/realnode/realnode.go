// Package realnode runs a real Kubernetes node on this machine beside the
// local control plane (local/controlplane): containerd and runc from
// Debian's packages, kubelet, kube-scheduler and kube-proxy (iptables mode)
// built from the control plane's Kubernetes version (make node), Debian's
// CNI plugins, and CoreDNS as the kube-system Deployment coredns. Pods run
// in real containers: images, cgroups, a read-only root, non-root users,
// probes, Services and cluster DNS are the real thing. The process node
// (local/node) stays for the fast tests; docs/realnode.md says what runs
// and why each setting is there.
//
// The node lives in a network and mount namespace of its own, held by one
// long-lived process, and touches the host only where it has to, each under
// a name carrying its marker (petri-rn-<id>): its work directory, its
// cgroups (kubelet's cgroupRoot) and the host end of its veth pair. Stop
// removes everything; a run that was killed is cleaned up by the next
// Start (see Sweep), and Leftovers says what of a run is still on the host.
//
// It needs root. Images are given to LoadImage (imported, nothing pulled)
// or, with Options.Registry, pushed to the node's registry and pulled by
// containerd as in a cluster.
package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/petri-dev/petri/local/controlplane"
)

// markerPrefix starts the name of everything a node leaves on the host.
const markerPrefix = "petri-rn-"

// NodeControllers are the kube-controller-manager controllers a real node
// needs beside Petri's (controlplane.DefaultControllers): the node
// lifecycle controller lifts the not-ready taint kubelet registers with
// (and taints a node that stops reporting), the EndpointSlice controller
// gives kube-proxy and CoreDNS the Services' endpoints.
var NodeControllers = append(slices.Clone(controlplane.DefaultControllers), "node-lifecycle-controller", "endpointslice-controller")

// Options configure a real node.
type Options struct {
	// Dir is where the node's work directory (petri-rn-<id>) is made;
	// os.TempDir() when empty. Start sweeps leftovers of killed runs there.
	Dir string
	// Bin holds kubelet, kube-scheduler, kube-proxy, coredns, crictl and
	// petri-pause (make node); the repository's bin/ when empty.
	Bin string
	// ControlPlane configures the control plane started for the node; Start
	// sets its Dir and APIServerAddress.
	ControlPlane controlplane.Options
	// Registry runs an OCI registry for the node (in this process, in
	// memory) on the host end of its link; containerd pulls from it over
	// plain HTTP. Node.Registry is its address: push to it with
	// go-containerregistry's remote.Write and name.Insecure
	// (hack/images.Push), and name images <Node.Registry>/<name>:<tag>.
	Registry bool
	// Routes routes the node's Service range (controlplane's
	// ServiceClusterIPRange) and pod range (PodCIDR) from the host to the
	// node, as a cluster's network reaches both from its nodes: the host
	// then reaches cluster IPs (through kube-proxy's rules in the node) and
	// pods. The routes go with the host end of the link; one node with
	// routes runs on a machine at a time.
	Routes bool
}

// Node is a running real node and the control plane it is registered to.
type Node struct {
	// Cluster is the control plane; its API server listens on HostIP.
	Cluster *controlplane.Cluster
	// Name is the Node's name; Marker names what the node leaves on the
	// host.
	Name, Marker string
	// Dir is the node's work directory.
	Dir string
	// HostIP is the host end of the node's link (the API server's address),
	// NodeIP the node's end (kubelet's InternalIP); HostLink is the host
	// end's interface.
	HostIP, NodeIP, HostLink string
	// NetNSInode identifies the node's network namespace ("net:[...]").
	NetNSInode string
	// Registry is the address (host:port) of the node's registry, empty
	// unless Options.Registry asked for one.
	Registry string

	bin                                           string
	holder, containerd, kubelet, scheduler, proxy *process
	procs                                         []*process
	stopOnce                                      sync.Once
	withRegistry, withRoutes                      bool
	registry                                      *http.Server
}

// Start sweeps leftovers of earlier runs, then starts the node's
// namespaces, a control plane listening on the host end of the node's link,
// the node's registry (Options.Registry), containerd, kubelet (until its
// Node is Ready), kube-scheduler, kube-proxy and CoreDNS (until available). On error everything started is removed.
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the real node needs root (network namespace, cgroups, mounts)")
	}
	parent := opts.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	bin := opts.Bin
	if bin == "" {
		if bin, err = controlplane.AssetsDir(); err != nil {
			return nil, err
		}
	}
	if err := checkBinaries(bin); err != nil {
		return nil, err
	}
	if err := Sweep(parent); err != nil {
		return nil, fmt.Errorf("sweep earlier runs: %w", err)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	n := &Node{Marker: markerPrefix + hex.EncodeToString(id), bin: bin, withRegistry: opts.Registry, withRoutes: opts.Routes}
	n.Name, n.HostLink = n.Marker, "prn-"+hex.EncodeToString(id)
	n.Dir = filepath.Join(parent, n.Marker)
	if err := n.makeDirs(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := n.startHolder(ctx); err != nil {
		return nil, err
	}
	if err := n.setupLink(ctx); err != nil {
		return nil, err
	}
	if err := makeCgroupRoots(n.Marker); err != nil {
		return nil, err
	}
	cp := opts.ControlPlane
	cp.Dir, cp.APIServerAddress = filepath.Join(n.Dir, "controlplane"), n.HostIP
	if len(cp.Controllers) == 0 {
		cp.Controllers = NodeControllers
	}
	if n.Cluster, err = controlplane.Start(cp); err != nil {
		return nil, err
	}
	if err := n.recordControlPlane(); err != nil {
		return nil, err
	}
	steps := []func(context.Context) error{n.startRegistry, n.startContainerd, n.startKubelet, n.startScheduler, n.startKubeProxy, n.startCoreDNS}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// makeDirs makes the work directory and records its owner, this process,
// so a sweep by another run leaves a live node alone.
func (n *Node) makeDirs() error {
	for _, d := range []string{"", "logs", "sysctl", "images", "controlplane"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(n.Dir, ownerFile), []byte(processIdentity(os.Getpid())), 0o644)
}

func checkBinaries(bin string) error {
	for _, b := range []string{"kubelet", "kube-scheduler", "kube-proxy", "coredns", "crictl", "petri-pause"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("real node binary %s missing in %s: run 'make node'", b, bin)
		}
	}
	for _, b := range []string{containerdPath, ctrPath, runcPath, filepath.Join(cniBinDir, "bridge"), nsenterPath, unsharePath, ipPath, "/usr/sbin/iptables"} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("real node needs %s: run 'make node' as root (it installs containerd, runc, containernetworking-plugins and iptables)", b)
		}
	}
	return nil
}

// Stop removes the node: its pods' containers and sandboxes, then every
// process (kube-proxy, kube-scheduler, kubelet, containerd, the shims and
// the holder, which takes the namespaces, mounts and iptables rules with
// it), its cgroups, the control plane and the work directory. It is safe to
// call more than once.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		for _, p := range []*process{n.proxy, n.scheduler, n.kubelet} {
			if p != nil {
				p.stop(10 * time.Second)
			}
		}
		if n.containerd != nil && n.containerd.exited() == nil {
			n.removePods()
		}
		for i := len(n.procs) - 1; i >= 0; i-- {
			n.procs[i].stop(10 * time.Second)
		}
		n.stopRegistry()
		if n.Cluster != nil {
			n.Cluster.Stop()
		}
		clean(n.Dir, n.Marker)
	})
}
