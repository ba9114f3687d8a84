package bench

import "github.com/petri-dev/petri/local/internal/benchkit"

// Dist summarises repeated measurements (median, 99th percentile, maximum);
// local/peers summarises its latencies with the same type, so the two
// benchmarks' figures are computed alike.
type Dist = benchkit.Dist
