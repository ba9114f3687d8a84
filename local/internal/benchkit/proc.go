package benchkit

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcCPU is a process's user and system CPU time from /proc/<pid>/stat,
// with that of the children it waited for when children is set (the Helm
// and git processes a repo-server runs, the pods' processes the local node
// waits for).
func ProcCPU(pid int, children bool) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(data), children)
}

// parseStatCPU reads utime and stime of a /proc stat line, and cutime and
// cstime when children is set.
func parseStatCPU(s string, children bool) (time.Duration, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 || end+2 > len(s) {
		return 0, fmt.Errorf("malformed /proc stat: %q", s)
	}
	fields := strings.Fields(s[end+2:])
	if len(fields) < 15 {
		return 0, fmt.Errorf("short /proc stat: %q", s)
	}
	n := 2
	if children {
		n = 4
	}
	var ticks int64
	for _, f := range fields[11 : 11+n] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat field %q: %w", f, err)
		}
		ticks += v
	}
	// USER_HZ is 100 on Linux.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// ProcStatusBytes reads a field in kB of /proc/<pid>/status (VmRSS:,
// VmHWM:), in bytes.
func ProcStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("%s not found in /proc status", strings.TrimSuffix(field, ":"))
}

// FreePorts finds n ports of 127.0.0.1 free at once, for the programs a
// benchmark starts to listen on side by side.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
