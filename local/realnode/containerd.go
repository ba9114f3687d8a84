package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	// snapshotter is containerd's for the node's images and containers.
	snapshotter = "overlayfs"
	// PauseImage is the pod sandbox image (local/realnode/pause).
	PauseImage = "petri.local/pause:v1"
	// PodCIDR is the pods' address range, inside the node's network
	// namespace only.
	PodCIDR = "10.88.0.0/16"
)

// containerdConfig is containerd 1.6's configuration for the node: its own
// root, state and socket under the work dir; runc (crun refuses hybrid
// cgroups) with cgroupfs; the CRI settings this machine needs:
// restrict_oom_score_adj (the bounding set lacks CAP_SYS_RESOURCE, so
// lowering oom_score_adj fails even as root), netns_mounts_under_state_dir
// (the pods' network namespaces live under the state dir, not /run/netns),
// no AppArmor; the node's own CNI configuration; and registry hosts under
// certs.d (the node's registry, over plain HTTP, when it has one).
const containerdConfig = `version = 2
root = "{{dir}}/containerd/root"
state = "{{dir}}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{{dir}}/containerd/containerd.sock"

[ttrpc]
  address = "{{dir}}/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{dir}}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{pause}}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{{snapshotter}}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{{runc}}"
        Root = "{{dir}}/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{{dir}}/containerd/certs.d"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{cnibin}}"
    conf_dir = "{{dir}}/cni"
`

// cniConfig is the pods' network: a bridge in the node's namespace that is
// the pods' gateway, masquerading what leaves the pod range (so pods reach
// the API server at the host end of the link), hairpin for a pod reaching
// itself through a Service, host-local addresses.
const cniConfig = `{
  "cniVersion": "1.0.0",
  "name": "petri",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": true,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "{{podcidr}}"}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": "{{dir}}/cni-ipam"
    }
  }]
}
`

func (n *Node) expand(tmpl string) string {
	return strings.NewReplacer("{{dir}}", n.Dir, "{{pause}}", PauseImage, "{{snapshotter}}", snapshotter,
		"{{runc}}", runcPath, "{{cnibin}}", cniBinDir, "{{podcidr}}", PodCIDR).Replace(tmpl)
}

func (n *Node) containerdSocket() string {
	return filepath.Join(n.Dir, "containerd", "containerd.sock")
}

// startContainerd starts containerd in the node's namespaces and waits for
// its socket; it then imports the pause image.
func (n *Node) startContainerd(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(n.Dir, "cni"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "cni", "10-petri.conflist"), []byte(n.expand(cniConfig)), 0o644); err != nil {
		return err
	}
	config := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(n.expand(containerdConfig)), 0o644); err != nil {
		return err
	}
	p, err := n.startProcess("containerd", n.inNode(containerdPath, "--config", config))
	if err != nil {
		return err
	}
	n.containerd = p
	if err := waitFor(ctx, "containerd", 30*time.Second, func(ctx context.Context) error {
		return n.ctr(ctx, "version")
	}, p); err != nil {
		return err
	}
	pause, err := n.pauseImage()
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	return n.LoadImage(ctx, PauseImage, pause)
}
