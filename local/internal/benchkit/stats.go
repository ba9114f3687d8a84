package benchkit

import (
	"slices"
	"time"
)

// Dist summarises repeated measurements of one duration: both benchmarks'
// tables print its median and 99th percentile, so both compute them alike.
type Dist struct {
	N      int
	Median time.Duration
	P99    time.Duration
	Max    time.Duration
}

// DistOf computes the median, the 99th percentile (nearest rank) and the
// maximum; the zero Dist when there are no samples.
func DistOf(samples []time.Duration) Dist {
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
