package peers

import (
	"regexp"
	"strings"

	"github.com/petri-dev/petri/local/internal/benchkit"
)

// Dist summarises one latency per pull request (median, 99th percentile,
// maximum), computed as local/bench computes its own.
type Dist = benchkit.Dist

var flowSchemaLabel = regexp.MustCompile(`[{,]flow_schema="([^"]*)"`)

// dispatchedBySchema is kube-apiserver's requests dispatched by flow schema
// (apiserver_flowcontrol_dispatched_requests_total) of a metrics scrape.
func dispatchedBySchema(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, "apiserver_flowcontrol_dispatched_requests_total{") {
			continue
		}
		if fs := flowSchemaLabel.FindStringSubmatch(k); fs != nil {
			out[fs[1]] += v
		}
	}
	return out
}

// requestsOf is the requests of the schemas between two scrapes.
func requestsOf(before, after map[string]float64, schemas []string) float64 {
	b, a := dispatchedBySchema(before), dispatchedBySchema(after)
	total := 0.0
	for _, s := range schemas {
		total += a[s] - b[s]
	}
	return total
}
