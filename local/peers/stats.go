package peers

import (
	"regexp"
	"slices"
	"strings"
	"time"
)

// Dist summarises one latency per pull request.
type Dist struct {
	N      int
	Median time.Duration
	P99    time.Duration
	Max    time.Duration
}

// distOf computes the median, the 99th percentile (nearest rank) and the
// maximum.
func distOf(samples []time.Duration) Dist {
	if len(samples) == 0 {
		return Dist{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return Dist{N: len(s), Median: quantile(s, 0.5), P99: quantile(s, 0.99), Max: s[len(s)-1]}
}

// quantile is the nearest-rank quantile of sorted samples; the median of an
// even count is the mean of the middle two.
func quantile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if q == 0.5 {
		if n%2 == 1 {
			return sorted[n/2]
		}
		return (sorted[n/2-1] + sorted[n/2]) / 2
	}
	rank := int(q*float64(n)+0.999999) - 1
	rank = max(0, min(n-1, rank))
	return sorted[rank]
}

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
