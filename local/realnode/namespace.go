package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/petri-dev/petri/local/controlplane"
)

const cgroupFS = "/sys/fs/cgroup"

// holderScript runs as the holder: the first process of the node's network
// and mount namespaces, which lives as long as the node (and dies with the
// process that started it). Every other program of the node joins its
// namespaces with nsenter, so all of them see the same mounts.
//
//   - /run, /var/lib and /var/log are tmpfs of the node: kubelet writes a few
//     host paths whatever its root dir (device-plugins/kubelet.sock under
//     /var/lib/kubelet, the /var/log/containers links), containerd 1.6 puts
//     its shims' sockets under /run/containerd and iptables its lock in /run.
//     They vanish with the namespace and the host's stay as they were.
//   - kubelet checks or writes vm.overcommit_memory, kernel.panic and
//     kernel.panic_on_oops, which are the host's: files holding the values it
//     expects are bind-mounted over them (here only), and kubelet runs with
//     protectKernelDefaults, so it only reads them.
//   - ip_forward and route_localnet are per network namespace: set here, for
//     Service traffic between pods; the host's stay 0.
const holderScript = `set -euo pipefail
dir=$1 marker=$2
for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=755 "$marker" "$d"; done
mkdir -p /var/log/pods /var/log/containers /var/lib/kubelet
mount --bind "$dir/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
mount --bind "$dir/sysctl/panic" /proc/sys/kernel/panic
mount --bind "$dir/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
ip link set lo up
echo ready
exec -a "$marker-holder" sleep infinity
`

// startHolder starts the holder in a new network and mount namespace and
// waits until its mounts are in place.
func (n *Node) startHolder(ctx context.Context) error {
	sysctls := map[string]string{"overcommit_memory": "1\n", "panic": "10\n", "panic_on_oops": "1\n"}
	for name, value := range sysctls {
		if err := os.WriteFile(filepath.Join(n.Dir, "sysctl", name), []byte(value), 0o444); err != nil {
			return err
		}
	}
	cmd := command(context.Background(), unsharePath, "--net", "--mount", "--propagation", "private", "--",
		bashPath, "-c", holderScript, "holder", n.Dir, n.Marker)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if n.holder, err = n.startProcess("holder", cmd); err != nil {
		return err
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("unexpected %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("node namespaces: %w; see %s", err, n.holder.log.Name())
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return errors.New("node namespaces: holder not ready within 30s")
	}
	ino, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", n.holder.cmd.Process.Pid))
	if err != nil {
		return err
	}
	n.NetNSInode = ino
	return nil
}

// setupLink joins the node's network namespace to the host with a veth
// pair: the host end HostIP, the node's end (eth0) NodeIP, and the node's
// default route through the host end (onlink; the host forwards nothing, so
// nothing leaves the machine). The host end goes with the namespace.
func (n *Node) setupLink(ctx context.Context) error {
	subnet, err := freeSubnet()
	if err != nil {
		return err
	}
	n.HostIP, n.NodeIP = subnet+".1", subnet+".2"
	pid := fmt.Sprint(n.holder.cmd.Process.Pid)
	steps := [][]string{
		{ipPath, "link", "add", n.HostLink, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{ipPath, "addr", "add", n.HostIP + "/30", "dev", n.HostLink},
		{ipPath, "link", "set", n.HostLink, "up"},
		{nsenterPath, "--target", pid, "--net", "--", ipPath, "addr", "add", n.NodeIP + "/30", "dev", "eth0"},
		{nsenterPath, "--target", pid, "--net", "--", ipPath, "link", "set", "eth0", "up"},
		{nsenterPath, "--target", pid, "--net", "--", ipPath, "route", "add", "default", "via", n.HostIP, "dev", "eth0", "onlink"},
	}
	if n.withRoutes {
		for _, cidr := range []string{controlplane.ServiceClusterIPRange, PodCIDR} {
			steps = append(steps, []string{ipPath, "route", "add", cidr, "via", n.NodeIP, "dev", n.HostLink})
		}
	}
	for _, s := range steps {
		if out, err := command(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			if s[1] == "route" && strings.Contains(string(out), "File exists") {
				return fmt.Errorf("node network: %s: the host routes %s already (another real node with Options.Routes runs?)", strings.Join(s, " "), s[3])
			}
			return fmt.Errorf("node network: %s: %w: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// freeSubnet returns the first 10.250.N (a /30 at N.0) no host interface
// has an address in.
func freeSubnet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			ip := ipn.IP.To4()
			used[fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2])] = true
		}
	}
	for i := 0; i < 256; i++ {
		s := fmt.Sprintf("10.250.%d", i)
		if !used[s] {
			return s, nil
		}
	}
	return "", errors.New("node network: no free subnet in 10.250.0.0/16")
}

// cgroupRoots are the node's cgroup roots (kubelet's cgroupRoot) in every
// hierarchy mounted under /sys/fs/cgroup; kubelet puts /kubepods and the
// pods' cgroups below them, so every cgroup of a run is found by its name.
func cgroupRoots(marker string) []string {
	var roots []string
	for _, h := range cgroupHierarchies() {
		roots = append(roots, filepath.Join(h, marker))
	}
	return roots
}

// cgroupHierarchies are the cgroup mounts under /sys/fs/cgroup (here the
// v1 controllers, name=systemd and the hybrid cgroup2 at unified).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir(cgroupFS)
	var hs []string
	for _, e := range entries {
		if e.IsDir() {
			hs = append(hs, filepath.Join(cgroupFS, e.Name()))
		}
	}
	return hs
}

// makeCgroupRoots creates the node's cgroup roots; in cpuset a child needs
// its CPUs and memory nodes before it can hold a process.
func makeCgroupRoots(marker string) error {
	for _, root := range cgroupRoots(marker) {
		if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", root, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(root), f))
			if err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(root, f), parent, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %w", filepath.Join(root, f), err)
			}
		}
	}
	return nil
}
