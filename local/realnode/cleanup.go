package realnode

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerFile in a work directory names the process that owns the node;
// ownedFile the control plane's processes and directories, which do not
// name the work directory and do not die with a killed test.
const (
	ownerFile = "owner"
	ownedFile = "controlplane-owned"
)

// markerRE finds markers in names, command lines and cgroup paths.
var markerRE = regexp.MustCompile(markerPrefix + `[0-9a-f]{8}`)

// removePods removes every pod sandbox and container through the CRI, as
// kubelet would: containers stopped, network torn down by CNI, sandboxes'
// namespaces and mounts released.
func (n *Node) removePods() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := command(ctx, filepath.Join(n.bin, "crictl"), "--runtime-endpoint", "unix://"+n.containerdSocket(),
		"--timeout", "20s", "rmp", "--all", "--force")
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.WriteFile(filepath.Join(n.Dir, "logs", "crictl-rmp.log"), out, 0o644)
	}
}

// Sweep removes what earlier runs whose owner died (a killed test) left
// under parent and on the host: processes, cgroups, the host ends of links
// and work directories carrying a marker. A running node is left alone.
func Sweep(parent string) error {
	markers := map[string]bool{}
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if markerRE.FindString(e.Name()) == e.Name() {
			markers[e.Name()] = true
		}
	}
	for _, h := range cgroupHierarchies() {
		found, _ := filepath.Glob(filepath.Join(h, markerPrefix+"*"))
		for _, f := range found {
			if m := filepath.Base(f); markerRE.FindString(m) == m {
				markers[m] = true
			}
		}
	}
	procs := processes()
	for _, p := range procs {
		for _, m := range markerRE.FindAllString(p.cmdline+p.cgroup, -1) {
			markers[m] = true
		}
	}
	var errs []string
	for m := range markers {
		if alive(parent, m, procs) {
			continue
		}
		if err := clean(filepath.Join(parent, m), m); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// alive reports whether the run of marker is still owned: its holder runs
// (it dies with the process that started it), or its owner does.
func alive(parent, marker string, procs []proc) bool {
	for _, p := range procs {
		if strings.HasPrefix(p.cmdline, marker+"-holder") {
			return true
		}
	}
	owner, err := os.ReadFile(filepath.Join(parent, marker, ownerFile))
	if err != nil {
		return false
	}
	pid, _ := strconv.Atoi(strings.Fields(string(owner) + " 0")[0])
	return pid > 0 && processIdentity(pid) == string(owner)
}

// recordControlPlane writes down the control plane's etcd and kube-apiserver
// (found by the address the API server listens on, and the etcd it names)
// and their directories, for a sweep after a killed run.
func (n *Node) recordControlPlane() error {
	var lines []string
	var etcdURL string
	procs := processes()
	for _, p := range procs {
		if strings.Contains(p.cmdline, "kube-apiserver") && strings.Contains(p.cmdline, "--bind-address="+n.HostIP+" ") {
			lines = append(lines, "process "+processIdentity(p.pid))
			etcdURL = flagValue(p.cmdline, "--etcd-servers")
			lines = append(lines, "dir "+flagValue(p.cmdline, "--cert-dir"))
		}
	}
	for _, p := range procs {
		if etcdURL != "" && strings.Contains(p.cmdline, "etcd") && strings.Contains(p.cmdline, "--listen-client-urls="+etcdURL) {
			lines = append(lines, "process "+processIdentity(p.pid), "dir "+flagValue(p.cmdline, "--data-dir"))
		}
	}
	if len(lines) < 4 {
		return fmt.Errorf("find the control plane's kube-apiserver and etcd: found %v", lines)
	}
	return os.WriteFile(filepath.Join(n.Dir, ownedFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// flagValue is the value of --name=value in a command line.
func flagValue(cmdline, name string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// cleanControlPlane kills the control plane's processes recorded in dir
// that still run (the same pid and start time) and removes their
// directories.
func cleanControlPlane(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, ownedFile))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		kind, value, _ := strings.Cut(line, " ")
		switch kind {
		case "process":
			pid, _ := strconv.Atoi(strings.Fields(value + " 0")[0])
			if pid > 0 && processIdentity(pid) == value {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		case "dir":
			if value != "" && strings.HasPrefix(value, os.TempDir()) {
				defer func() { _ = os.RemoveAll(value) }()
			}
		}
	}
}

// clean kills every process of marker (by its command line or cgroup) and
// of its control plane, removes its cgroups and host link, and removes dir.
func clean(dir, marker string) error {
	cleanControlPlane(dir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := 0
		for _, p := range processes() {
			if p.of(dir, marker) {
				left++
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		removeCgroups(marker)
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if link := "prn-" + strings.TrimPrefix(marker, markerPrefix); linkExists(link) {
		_ = exec.Command(ipPath, "link", "del", link).Run()
	}
	for _, m := range mountsUnder(dir, marker) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	var errs []string
	if dir != "" && os.Getenv("PETRI_KEEP_NODE_DIR") == "" {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if left := Leftovers(dir, marker, ""); len(left) > 0 {
		errs = append(errs, fmt.Sprintf("left of %s: %s", marker, strings.Join(left, ", ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("clean %s: %s", marker, strings.Join(errs, "; "))
	}
	return nil
}

// Leftovers lists what of the run of marker is still on the host:
// processes, cgroups, its network namespace (netnsInode, when known),
// its host link, mounts under dir and dir itself (unless kept on purpose).
func Leftovers(dir, marker, netnsInode string) []string {
	var left []string
	for _, p := range processes() {
		if p.of(dir, marker) {
			left = append(left, fmt.Sprintf("process %d (%s)", p.pid, strings.TrimSpace(p.cmdline)))
		} else if netnsInode != "" && p.netns == netnsInode {
			left = append(left, fmt.Sprintf("process %d in the node's network namespace", p.pid))
		}
	}
	for _, root := range cgroupRoots(marker) {
		if _, err := os.Stat(root); err == nil {
			left = append(left, "cgroup "+root)
		}
	}
	if link := "prn-" + strings.TrimPrefix(marker, markerPrefix); linkExists(link) {
		left = append(left, "link "+link)
	}
	for _, m := range mountsUnder(dir, marker) {
		left = append(left, "mount "+m)
	}
	if _, err := os.Stat(dir); err == nil && os.Getenv("PETRI_KEEP_NODE_DIR") == "" {
		left = append(left, "directory "+dir)
	}
	return left
}

// removeCgroups removes the cgroups below the node's roots, deepest first;
// a cgroup that still holds a process stays until the next try.
func removeCgroups(marker string) {
	for _, root := range cgroupRoots(marker) {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			_ = syscall.Rmdir(d)
		}
	}
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// mountsUnder lists the host's mounts under dir or whose source is marker.
func mountsUnder(dir, marker string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		target := f[4]
		source := ""
		for i, x := range f {
			if x == "-" && i+2 < len(f) {
				source = f[i+2]
			}
		}
		if (dir != "" && (target == dir || strings.HasPrefix(target, dir+"/"))) || source == marker {
			found = append(found, target)
		}
	}
	sort.Slice(found, func(i, j int) bool { return len(found[i]) > len(found[j]) })
	return found
}

// proc is what a sweep reads of one process.
type proc struct {
	pid                    int
	cmdline, cgroup, netns string
}

// of reports whether p belongs to the run of marker: its command line names
// the marker or the work directory (every program of the node does, the
// shims too), or it lives in the run's cgroups (the containers).
func (p proc) of(dir, marker string) bool {
	return strings.Contains(p.cmdline, marker) || (dir != "" && strings.Contains(p.cmdline, dir)) ||
		strings.Contains(p.cgroup, "/"+marker+"/") || strings.HasSuffix(strings.TrimSpace(p.cgroup), "/"+marker)
}

func processes() []proc {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cgroup, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		netns, _ := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net"))
		out = append(out, proc{pid: pid, cmdline: string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})), cgroup: string(cgroup), netns: netns})
	}
	return out
}

// processIdentity is a process's pid and start time, which together name
// it even after the pid is reused.
func processIdentity(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The fields after the command name (which may hold spaces) start at
	// the state; the start time is the 22nd field.
	rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 20 {
		return ""
	}
	return fmt.Sprintf("%d %s", pid, f[19])
}
