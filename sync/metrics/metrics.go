// Package metrics holds sync's Prometheus metrics, on a registry of its own
// so that tests can run several syncs in one process.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are sync's counters and gauges.
type Metrics struct {
	Registry *prometheus.Registry

	WebhookEvents *prometheus.CounterVec
	// WebhookReadsInFlight is how many webhook bodies are being read and
	// checked now; at the handler's limit, further deliveries get 503.
	WebhookReadsInFlight prometheus.Gauge
	Reconciles           *prometheus.CounterVec
	ReconcileDuration    prometheus.Histogram
	WebhookToWrite       prometheus.Histogram
	GitHubRequests       *prometheus.CounterVec
	RateLimit            prometheus.Gauge
	Environments         *prometheus.GaugeVec
	ConfigErrors         prometheus.Gauge
	Writes               *prometheus.CounterVec
	// Leader is 1 on the replica that holds sync's lease and acts, 0 on
	// the others.
	Leader prometheus.Gauge
	// Refreshes counts the refresh marks a replica that does not lead
	// records on the repositories' Repository objects for the leader, and
	// those the leader takes, by outcome.
	Refreshes *prometheus.CounterVec
	// Commands counts pull-request commands by command and outcome
	// (accepted, refused, invalid, failed: given up after failing).
	Commands *prometheus.CounterVec
	// Lifecycle counts what sync did to environments on its own, by
	// action (expired, sleep_requested).
	Lifecycle *prometheus.CounterVec
	// UncachedLists counts repository reconciles that listed their
	// environments from the API server because sync's cache did not show
	// one of its own writes yet.
	UncachedLists prometheus.Counter
	// Resyncs counts repository reconciles that took a resync, by result:
	// done (every open pull request listed and the comments since the last
	// resync read, whatever the rest of the pass did) or failed (the resync
	// is due again, for the pass that retries).
	Resyncs *prometheus.CounterVec
}

// New registers every metric on a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		WebhookEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_webhook_events_total", Help: "Webhook deliveries received, by event type and outcome (queued, ignored, unauthorized, malformed, too_large, timeout, busy, rejected).",
		}, []string{"event", "result"}),
		WebhookReadsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "petri_sync_webhook_reads_in_flight", Help: "Webhook bodies being read and checked now, before their signature is known.",
		}),
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_reconciles_total", Help: "Repository reconciles, by outcome.",
		}, []string{"result"}),
		ReconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "petri_sync_reconcile_duration_seconds", Help: "Duration of repository reconciles.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		WebhookToWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "petri_sync_webhook_to_write_seconds", Help: "Time from receiving a webhook to writing the EphemeralEnvironment it caused.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		GitHubRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_github_requests_total", Help: "HTTP requests sent to the GitHub API, by method and status code (304 answers cost no rate limit).",
		}, []string{"method", "code"}),
		RateLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "petri_sync_github_rate_limit_remaining", Help: "Remaining GitHub API rate limit, as last announced.",
		}),
		Environments: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "petri_sync_environments", Help: "EphemeralEnvironments written by sync, by application.",
		}, []string{"application"}),
		ConfigErrors: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "petri_sync_config_errors", Help: "Errors in the current revision of the config repository.",
		}),
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_writes_total", Help: "Objects written or deleted by sync, by kind and operation.",
		}, []string{"kind", "operation"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "petri_sync_leader", Help: "1 while this replica holds sync's lease and acts (writes, reports), 0 while it only answers webhooks and records them for the leader.",
		}),
		Refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_refresh_marks_total", Help: "Webhooks a replica that does not lead recorded for the leader as refresh marks on Repository objects, and marks the leader took, by outcome (recorded, overflow, failed, taken).",
		}, []string{"result"}),
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_commands_total", Help: "Pull-request commands (/petri ...) handled, by command and outcome (accepted, refused, invalid, failed).",
		}, []string{"command", "result"}),
		Lifecycle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_lifecycle_total", Help: "Environments sync expired or asked to sleep on its own, by action (expired, sleep_requested).",
		}, []string{"action"}),
		UncachedLists: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "petri_sync_uncached_environment_lists_total", Help: "Repository reconciles that listed environments from the API server because sync's cache did not show one of its own writes yet.",
		}),
		Resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "petri_sync_resyncs_total", Help: "Repository reconciles that took a resync, by result: done (every open pull request listed, the comments since the last resync read) or failed (due again for the retry).",
		}, []string{"result"}),
	}
	m.Registry.MustRegister(m.WebhookEvents, m.WebhookReadsInFlight, m.Reconciles, m.ReconcileDuration, m.WebhookToWrite, m.GitHubRequests,
		m.RateLimit, m.Environments, m.ConfigErrors, m.Writes, m.Leader, m.Refreshes, m.Commands, m.Lifecycle, m.UncachedLists, m.Resyncs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// GitHubRequest implements the GitHub provider's Observer.
func (m *Metrics) GitHubRequest(method string, code int) {
	m.GitHubRequests.WithLabelValues(method, strconv.Itoa(code)).Inc()
}

// GitHubRateLimit implements the GitHub provider's Observer.
func (m *Metrics) GitHubRateLimit(remaining int, _ time.Time) {
	m.RateLimit.Set(float64(remaining))
}
