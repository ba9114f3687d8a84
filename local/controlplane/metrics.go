package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"time"
)

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+)$`)

// ParseMetrics reads the Prometheus text format into "name{labels}" ->
// value.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		out[m[1]+m[2]] = v
	}
	return out, sc.Err()
}

// APIServerMetrics reads kube-apiserver's own metrics (its request
// counters among them) as ParseMetrics returns them.
func (c *Cluster) APIServerMetrics(ctx context.Context) (map[string]float64, error) {
	data, err := c.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(bytes.NewReader(data))
}

// APIServerCPUProfile records kube-apiserver's CPU profile for d (its
// /debug/pprof/profile, served to the cluster's admin) into path.
func (c *Cluster) APIServerCPUProfile(ctx context.Context, d time.Duration, path string) error {
	data, err := c.Clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(max(1, int(d.Seconds())))).Timeout(d + time.Minute).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver CPU profile: %w", err)
	}
	return os.WriteFile(path, data, 0o644)
}
