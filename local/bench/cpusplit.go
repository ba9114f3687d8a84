package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/petri-dev/petri/local/internal/benchkit"
)

// cpuParts are the processes whose CPU time a scale run splits: the control
// plane's, the operator's, and this process (the local node, the pods'
// processes it waited for, the benchmark's watches).
var cpuParts = []string{"kube-apiserver", "etcd", "kube-controller-manager", "petri-operator", "node/pods/benchmark"}

// cpuSample is the CPU time used so far by each of cpuParts.
type cpuSample map[string]time.Duration

// sampleCPU reads /proc for the CPU time of this process's children by
// command name, and of this process with the children it waited for.
func sampleCPU() cpuSample {
	out := cpuSample{}
	self := os.Getpid()
	if t, err := benchkit.ProcCPU(self, true); err == nil {
		out["node/pods/benchmark"] = t
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self {
			continue
		}
		data, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		comm := s[open+1 : end]
		fields := strings.Fields(s[end+2:])
		if len(fields) < 13 || fields[1] != strconv.Itoa(self) {
			continue
		}
		name := ""
		for _, p := range cpuParts[:4] {
			// The kernel keeps 15 characters of a command name.
			if comm == p || len(p) > 15 && comm == p[:15] {
				name = p
			}
		}
		if name == "" {
			continue
		}
		if t, err := benchkit.ProcCPU(pid, false); err == nil {
			out[name] += t
		}
	}
	return out
}

// since is the CPU time each part used between two samples.
func (after cpuSample) since(before cpuSample) cpuSample {
	out := cpuSample{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// total is the CPU time of every part together.
func (s cpuSample) total() time.Duration {
	var t time.Duration
	for _, v := range s {
		t += v
	}
	return t
}

// cores is the split as cores used on average over d.
func (s cpuSample) cores(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	var parts []string
	for _, p := range cpuParts {
		if v, ok := s[p]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", p, v.Seconds()/d.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}
