package bench

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/petri-dev/petri/local/internal/benchkit"
)

// Machine describes where the figures were taken.
type Machine struct {
	CPUs      int
	MemoryMiB int64
	CPUModel  string
	GoVersion string
	Date      time.Time
	// LoadAverage is /proc/loadavg's first three fields at the start.
	LoadAverage string
}

func thisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Date: time.Now().UTC(), LoadAverage: benchkit.LoadAverage()}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemoryMiB = kb / 1024
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return m
}
