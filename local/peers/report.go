package peers

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Markers of the generated part of docs/benchmarks.md's section.
const (
	BeginMarker = "<!-- petri-bench-peers:begin (make bench-peers rewrites up to the end marker) -->"
	EndMarker   = "<!-- petri-bench-peers:end -->"
)

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// sumCPU and maxRSS add a system's processes up.
func sumCPU(m map[string]time.Duration) time.Duration {
	var t time.Duration
	for _, v := range m {
		t += v
	}
	return t
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// WriteTable writes the figures as markdown tables.
func (r *Results) WriteTable(w io.Writer) {
	b := &bytes.Buffer{}
	fmt.Fprintf(b, "| machine | |\n|---|---|\n| CPUs | %d |\n| Go | %s |\n| date | %s |\n| load average (1, 5, 15 min) at the start | %s |\n| run took | %s |\n\n",
		r.Machine.CPUs, r.Machine.GoVersion, r.Machine.Date.Format("2006-01-02 15:04 UTC"), r.Machine.LoadAverage, secs(r.Took))
	fmt.Fprintln(b, "| pull requests | system | opened → healthy p50 / p99 | all healthy | pushed → healthy p50 / p99 | all healthy | closed → gone p50 / p99 | all gone | namespaces left | CPU | peak memory | kube-apiserver requests per environment | GitHub requests per pull request | of them content-generating (POST, PATCH, PUT, DELETE) |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.Sizes {
		for _, sys := range s.Systems {
			fmt.Fprintf(b, "| %d | %s |", s.PullRequests, sys.System)
			for _, ph := range []string{PhaseOpen, PhasePush, PhaseClose} {
				l := sys.Latency[ph]
				all := secs(sys.All[ph])
				if m := sys.Missing[ph]; m > 0 {
					all += fmt.Sprintf(" (%d missed)", m)
				}
				if l.N == 0 {
					fmt.Fprintf(b, " - | %s |", all)
					continue
				}
				fmt.Fprintf(b, " %s / %s | %s |", secs(l.Median), secs(l.P99), all)
			}
			var peak int64
			for _, v := range sys.PeakRSS {
				peak += v
			}
			fmt.Fprintf(b, " %d | %s | %s | %.1f | %.1f | %.1f |\n", sys.NamespacesLeft, secs(sumCPU(sys.CPU)), mib(peak), sys.APIRequests, sys.GitHubRequests, sys.GitHubWrites)
		}
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "CPU time and peak memory by process (peak memory: each process's own high-water mark over the size, the sum above; for Petri's deploy Jobs the largest one process):")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| pull requests | system | by process (CPU, peak memory) |")
	fmt.Fprintln(b, "|---|---|---|")
	for _, s := range r.Sizes {
		for _, sys := range s.Systems {
			var parts []string
			for _, p := range sortedKeys(sys.CPU) {
				part := fmt.Sprintf("%s %s, %s", p, secs(sys.CPU[p]), mib(sys.PeakRSS[p]))
				if n := sys.Restarts[p]; n > 0 {
					part += fmt.Sprintf(", restarted %d×", n)
				}
				parts = append(parts, part)
			}
			fmt.Fprintf(b, "| %d | %s | %s |\n", s.PullRequests, sys.System, strings.Join(parts, "; "))
		}
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "GitHub requests per pull request, by request:")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "| pull requests | system | requests |")
	fmt.Fprintln(b, "|---|---|---|")
	for _, s := range r.Sizes {
		for _, sys := range s.Systems {
			var parts []string
			for _, k := range sortedByValue(sys.GitHubByShape) {
				parts = append(parts, fmt.Sprintf("`%s` %.2f", k, sys.GitHubByShape[k]))
			}
			fmt.Fprintf(b, "| %d | %s | %s |\n", s.PullRequests, sys.System, strings.Join(parts, ", "))
		}
	}
	for _, s := range r.Sizes {
		for _, sys := range s.Systems {
			if sys.Error != "" {
				fmt.Fprintf(b, "\n%d pull requests, %s: %s\n", s.PullRequests, sys.System, sys.Error)
			}
		}
	}
	_, _ = w.Write(b.Bytes())
}

func sortedByValue(m map[string]float64) []string {
	keys := sortedKeys(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	return keys
}

// UpdateDoc rewrites the part of path between the markers with the tables.
func (r *Results) UpdateDoc(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var tables bytes.Buffer
	r.WriteTable(&tables)
	out, err := ReplaceBetween(string(data), "\n## Latest run beside Argo CD\n\n"+tables.String()+"\n")
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// ReplaceBetween replaces what is between the markers of doc with body.
func ReplaceBetween(doc, body string) (string, error) {
	i := strings.Index(doc, BeginMarker)
	j := strings.Index(doc, EndMarker)
	if i < 0 || j < i {
		return "", fmt.Errorf("the markers %q and %q are not in the file", BeginMarker, EndMarker)
	}
	return doc[:i+len(BeginMarker)] + "\n" + body + doc[j:], nil
}
