package realnode_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/petri-dev/petri/local/realnode"
)

// hostState is what of the host a node could change.
type hostState struct {
	iptables   string
	links      []string
	netns      []string
	hostPaths  map[string]bool
	cgroupDirs []string
	sysctls    map[string]string
}

// hostSysctls are the host's sysctls kubelet and kube-proxy would write.
var hostSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward",
	"net/ipv4/conf/all/route_localnet", "net/netfilter/nf_conntrack_max"}

// kubeletHostPaths are paths kubelet writes whatever its root dir.
var kubeletHostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/usr/libexec/kubernetes",
	"/run/containerd", "/run/xtables.lock", "/var/lib/cni", "/etc/cni"}

func readHost() hostState {
	s := hostState{hostPaths: map[string]bool{}, sysctls: map[string]string{}}
	for _, k := range hostSysctls {
		v, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		s.sysctls[k] = strings.TrimSpace(string(v))
	}
	if out, err := exec.Command("iptables-save").Output(); err == nil {
		s.iptables = stripComments(string(out))
	}
	// Only links a node makes: another run may be up at the same time.
	if entries, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "prn-") || strings.HasPrefix(e.Name(), "cni") || strings.HasPrefix(e.Name(), "veth") {
				s.links = append(s.links, e.Name())
			}
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			s.netns = append(s.netns, e.Name())
		}
	}
	for _, p := range kubeletHostPaths {
		_, err := os.Stat(p)
		s.hostPaths[p] = err == nil
	}
	// kubepods at the top of a hierarchy would be a kubelet's without the
	// node's cgroupRoot; the run's own are among its Leftovers.
	s.cgroupDirs, _ = filepath.Glob("/sys/fs/cgroup/*/kubepods*")
	sort.Strings(s.cgroupDirs)
	return s
}

// stripComments drops iptables-save's comment and counter-free header
// lines, which carry the time of the dump.
func stripComments(dump string) string {
	var keep []string
	for _, l := range strings.Split(dump, "\n") {
		if !strings.HasPrefix(l, "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestStopLeavesNothing stops the node (the tests before it are done with
// it) and checks the host is as it was: no process, cgroup, network
// namespace, link, mount, iptables rule, kubelet host path or work
// directory of the run.
func TestStopLeavesNothing(t *testing.T) {
	// While running, the node's pods live in its cgroups and its rules in
	// its own namespace only.
	pods, err := filepath.Glob(filepath.Join("/sys/fs/cgroup/memory", node.Marker, "kubepods", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, pods, "pods' cgroups under the node's cgroup root while it runs")
	running := readHost()
	assert.Equal(t, hostBefore.iptables, running.iptables, "the host's iptables rules while the node runs")
	assert.Equal(t, hostBefore.sysctls, running.sysctls, "the host's sysctls while the node runs")

	node.Stop()

	assert.Empty(t, realnode.Leftovers(node.Dir, node.Marker, node.NetNSInode), "nothing of the run on the host")
	after := readHost()
	assert.Equal(t, hostBefore.iptables, after.iptables, "the host's iptables rules")
	assert.NotContains(t, after.iptables, "KUBE-")
	assert.NotContains(t, after.iptables, "CNI-")
	assert.Equal(t, hostBefore.links, after.links, "the host's prn-, cni and veth links")
	assert.NotContains(t, after.links, node.HostLink)
	assert.Equal(t, hostBefore.netns, after.netns, "named network namespaces")
	assert.Equal(t, hostBefore.hostPaths, after.hostPaths, "kubelet's and containerd's host paths")
	assert.Equal(t, hostBefore.cgroupDirs, after.cgroupDirs, "kubepods cgroups")
	for _, root := range []string{"memory", "pids", "cpu", "unified", "systemd"} {
		_, err := os.Stat(filepath.Join("/sys/fs/cgroup", root, node.Marker))
		assert.True(t, os.IsNotExist(err), "the node's %s cgroup is removed", root)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), node.Marker, "mounts of the run")
	assert.NotContains(t, string(mounts), node.Dir)
	_, err = os.Stat(node.Dir)
	assert.True(t, os.IsNotExist(err), "the work directory is removed")
	for _, name := range []string{"containerd", "kubelet", "kube-proxy", "kube-scheduler", "containerd-shim"} {
		out, _ := exec.Command("pgrep", "-f", name+".*"+node.Marker).Output()
		assert.Empty(t, strings.TrimSpace(string(out)), "%s processes of the run", name)
	}
}
