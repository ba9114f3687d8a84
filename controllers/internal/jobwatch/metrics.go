package jobwatch

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	jobDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "petri_job_duration_seconds",
		Help:    "Run time of Petri's Jobs by action and outcome.",
		Buckets: prometheus.ExponentialBuckets(0.5, 2, 12),
	}, []string{"action", "outcome"})
	jobFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "petri_job_failures_total",
		Help: "Petri Jobs that failed, by action.",
	}, []string{"action"})
)

func init() {
	metrics.Registry.MustRegister(jobDuration, jobFailures)
}

// Record observes a finished Job's duration and counts failures; called
// once, on the transition that sees the Job finish.
func Record(action string, st State) {
	outcome := "succeeded"
	if !st.Succeeded {
		outcome = "failed"
		jobFailures.WithLabelValues(action).Inc()
	}
	if st.Started != nil && st.Finished != nil {
		jobDuration.WithLabelValues(action, outcome).Observe(st.Finished.Sub(st.Started.Time).Seconds())
	}
}
