// Package options holds the operator's settings: what cmd/petri-operator's
// flags fill in, their defaults and their validation, and the operator's
// clock. Every controller package is handed them; none reads a flag.
package options

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"
)

// Options are the operator's settings; cmd/petri-operator fills them from
// flags and tests use the same defaults.
type Options struct {
	// ManagementNamespace holds every Petri resource of this installation,
	// the deployer ServiceAccounts, Jobs and values Secrets.
	ManagementNamespace string
	// SharedNamespace is where shared workloads are placed. It is a placement
	// namespace, not a tenant or access boundary.
	SharedNamespace string
	// DeployerImage runs every Helm operation.
	DeployerImage string
	// Concurrency is the number of environments reconciled at once. A
	// pass spends its time waiting on the API server (a handful of
	// requests in a row), so workers, not the operator's CPU, bound how
	// many environments move at once; the API server's priority and
	// fairness bounds what they cost it. At 100 environments created
	// together, 32 workers gave the last of them its first pass 7 to 10 s
	// after its create (docs/benchmarks.md).
	Concurrency int
	// JobBackoffLimit is the retry count of each Job's pod.
	JobBackoffLimit int32
	// JobActiveDeadline bounds the run time of one Job.
	JobActiveDeadline time.Duration
	// JobTTLAfterFinished keeps finished Jobs (and their pods' logs) this long.
	JobTTLAfterFinished time.Duration
	// JobResources are the requests (and limits) of every Job's container:
	// the scheduler places Job pods by them, so a burst of environments
	// queues its Jobs as Pending pods rather than running hundreds at once
	// on too few CPUs.
	JobResources corev1.ResourceRequirements
	// ChartCASecret names a Secret in the management namespace whose ca.crt
	// the deployer trusts for https chart repositories and registries.
	ChartCASecret string
	// PlainHTTPRegistries are OCI registry hosts reached over plain HTTP.
	PlainHTTPRegistries []string
	// TeardownBackoff is the first retry delay of a failed teardown step.
	TeardownBackoff time.Duration
	// SharedWorkloadRetryBackoff is the first wait before a shared
	// workload's failed deploy is tried again (doubled per attempt, as a
	// component's spec.retry.backoff); 0 is a component's default, 10 s.
	// A SharedWorkload has no retry policy in its spec; the operator's
	// tests shorten the wait instead of spending it.
	SharedWorkloadRetryBackoff time.Duration
	// VerifyInterval is how often a deployed environment's releases are
	// verified by a Job running as its deployer identity; 0 turns the
	// periodic check off (a lost RoleBinding still triggers one).
	VerifyInterval time.Duration
	// WorkloadPodSecurity is the Pod Security Standards level (privileged,
	// baseline, restricted) that every environment's namespace and the
	// shared namespace enforce; an installation setting the fences read too
	// (podsecurity.go).
	WorkloadPodSecurity string
	// DeployerAuthorizationTimeout is how long a new deployer RoleBinding
	// may take to be honoured by the API server's authorizer before the
	// environment is Stalled with DeployerNotAuthorized; it is asked again
	// meanwhile and after, less and less often.
	DeployerAuthorizationTimeout time.Duration

	// ClusterProbeInterval is how often each registered workload cluster is
	// probed; 0 is 30 seconds.
	ClusterProbeInterval time.Duration
	// WorkloadClusters turns on placement in registered WorkloadClusters;
	// off, an environment with spec.placement waits, saying so.
	WorkloadClusters bool
	// WorkloadHealth turns on the health watch (controllers/health.go):
	// the operator watches the Deployments, StatefulSets and DaemonSets of
	// the environments' releases, and a Ready environment whose workload
	// stops running is Degraded until it runs again. Off, Ready says only
	// that the deploy succeeded.
	WorkloadHealth bool
	// WithoutFences is --require-fences=false: the operator runs knowingly
	// without admission fences, in the management cluster and in every
	// workload cluster, whose probe then checks Petri's identity there but
	// not its fences (and its Reachable condition says so).
	WithoutFences bool

	// MetricsAddr, ProbeAddr and LeaderElection configure the manager.
	MetricsAddr    string
	ProbeAddr      string
	LeaderElection bool
	// PprofAddr serves net/http/pprof for profiling; off when empty.
	PprofAddr string
	// LeaderElectionID names the lease; one per installation.
	LeaderElectionID string
	// LeaseDuration is how long a standby waits after the leader's last
	// renewal before it takes the Lease: the time a leader that died
	// without releasing it (one that stops releases it at once) leaves the
	// operator idle, and the bound on RenewDeadline.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// stops and exits; controller-runtime gives each Lease request half of
	// it as its timeout. Its default of 10 s (5 s a request) made a leader
	// on a saturated API server exit on one slow renewal.
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews (and retries a failed
	// renewal) and a standby tries to take the Lease: each renewal is a
	// write to etcd, so not more often than a slow API server needs.
	RetryPeriod time.Duration

	// Clock is the operator's time; nil is the real clock. Tests give a
	// fake one and move it.
	Clock clock.PassiveClock

	// NamespaceHash derives the hash suffix of a workload namespace from the
	// environment's UID; nil means naming.UIDHash.
	NamespaceHash func(uid string) string
}

// The leader election's defaults (Options.LeaseDuration): a renewal may
// take up to RenewDeadline/2 (20 s) and is retried every RetryPeriod until
// RenewDeadline; a standby takes over LeaseDuration after the last renewal.
const (
	DefaultLeaseDuration = 60 * time.Second
	DefaultRenewDeadline = 40 * time.Second
	DefaultRetryPeriod   = 5 * time.Second
)

// Default are the production defaults.
func Default() Options {
	return Options{
		ManagementNamespace:          "petri-system",
		SharedNamespace:              "petri-shared",
		DeployerImage:                "ghcr.io/petri-dev/petri-deployer:latest",
		Concurrency:                  64,
		JobBackoffLimit:              2,
		JobActiveDeadline:            15 * time.Minute,
		JobTTLAfterFinished:          24 * time.Hour,
		JobResources:                 DefaultJobResources(),
		TeardownBackoff:              2 * time.Second,
		VerifyInterval:               10 * time.Minute,
		DeployerAuthorizationTimeout: 2 * time.Minute,
		WorkloadPodSecurity:          DefaultWorkloadPodSecurity,
		MetricsAddr:                  ":8080",
		ProbeAddr:                    ":8081",
		LeaderElection:               true,
		LeaderElectionID:             "petri-operator.petri.dev",
		LeaseDuration:                DefaultLeaseDuration,
		RenewDeadline:                DefaultRenewDeadline,
		RetryPeriod:                  DefaultRetryPeriod,
		WorkloadClusters:             true,
		WorkloadHealth:               true,
	}
}

// BindFlags registers the operator's flags on fs, defaulting to o.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.ManagementNamespace, "management-namespace", o.ManagementNamespace, "namespace holding Petri's resources, Jobs and deployer identities")
	fs.StringVar(&o.SharedNamespace, "shared-namespace", o.SharedNamespace, "placement namespace of shared workloads (not an access boundary)")
	fs.StringVar(&o.DeployerImage, "deployer-image", o.DeployerImage, "image that runs Helm operations in Jobs")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "environments reconciled at once")
	fs.Func("job-backoff-limit", fmt.Sprintf("pod retries of each Job (default %d)", o.JobBackoffLimit), func(s string) error {
		var v int32
		_, err := fmt.Sscan(s, &v)
		o.JobBackoffLimit = v
		return err
	})
	fs.DurationVar(&o.JobActiveDeadline, "job-active-deadline", o.JobActiveDeadline, "longest run time of one Job")
	fs.DurationVar(&o.JobTTLAfterFinished, "job-ttl-after-finished", o.JobTTLAfterFinished, "how long finished Jobs and their pods are kept")
	quantity := func(flag string, list *corev1.ResourceList, name corev1.ResourceName) {
		def := ""
		if q, ok := (*list)[name]; ok {
			def = q.String()
		}
		fs.Func(flag, fmt.Sprintf("%s of every Job's container, a Kubernetes quantity; 0 for none (default %q)", strings.ReplaceAll(strings.TrimPrefix(flag, "job-"), "-", " "), def), func(v string) error {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return fmt.Errorf("%q is not a quantity (like 100m, 0.5, 128Mi): %w", v, err)
			}
			if q.Sign() < 0 {
				return fmt.Errorf("%q is negative", v)
			}
			if *list == nil {
				*list = corev1.ResourceList{}
			}
			if q.IsZero() {
				delete(*list, name)
				return nil
			}
			(*list)[name] = q
			return nil
		})
	}
	quantity("job-cpu-request", &o.JobResources.Requests, corev1.ResourceCPU)
	quantity("job-memory-request", &o.JobResources.Requests, corev1.ResourceMemory)
	quantity("job-cpu-limit", &o.JobResources.Limits, corev1.ResourceCPU)
	quantity("job-memory-limit", &o.JobResources.Limits, corev1.ResourceMemory)
	fs.StringVar(&o.ChartCASecret, "chart-ca-secret", o.ChartCASecret, "Secret (key ca.crt) in the management namespace trusted for chart repositories and registries")
	fs.Func("plain-http-registry", "OCI registry host reached over plain HTTP (repeatable)", func(s string) error {
		o.PlainHTTPRegistries = append(o.PlainHTTPRegistries, s)
		return nil
	})
	fs.DurationVar(&o.TeardownBackoff, "teardown-backoff", o.TeardownBackoff, "first retry delay of a failed teardown step")
	fs.DurationVar(&o.VerifyInterval, "verify-interval", o.VerifyInterval, "how often a deployed environment's releases are verified by a Job (0 disables the periodic check)")
	fs.DurationVar(&o.DeployerAuthorizationTimeout, "deployer-authorization-timeout", o.DeployerAuthorizationTimeout, "how long a deployer's new RoleBinding may take to take effect before its environment is Stalled (it is checked again after, less often)")
	fs.StringVar(&o.WorkloadPodSecurity, "workload-pod-security", o.WorkloadPodSecurity, "Pod Security Standards level (privileged, baseline, restricted) enforced in every environment's namespace and the shared namespace; the fences read the same value from the ConfigMap petri-operator (workload-pod-security)")
	fs.BoolVar(&o.WorkloadClusters, "workload-clusters", o.WorkloadClusters, "place environments with spec.placement in the registered WorkloadClusters (docs/clusters.md)")
	fs.BoolVar(&o.WorkloadHealth, "workload-health", o.WorkloadHealth, "watch the Deployments, StatefulSets and DaemonSets of the environments' releases, and mark a Ready environment whose workload stops running Degraded (docs/troubleshooting.md)")
	fs.DurationVar(&o.ClusterProbeInterval, "cluster-probe-interval", o.ProbeInterval(), "how often each registered workload cluster is probed")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "address of the Prometheus metrics endpoint (0 disables)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "address of the healthz and readyz endpoints")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, "address of the net/http/pprof endpoints (empty disables)")
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "elect a leader so only one replica reconciles")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "name of the leader election lease")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "how long a standby waits after the leader's last renewal before it takes the lease")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline, "how long the leader keeps trying to renew its lease before it stops; each renewal request may take half of it")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "how often the leader renews its lease and a standby tries to take it")
}

// Validate refuses settings the operator cannot run with.
func (o *Options) Validate() error {
	switch {
	case o.ManagementNamespace == "":
		return fmt.Errorf("--management-namespace must not be empty")
	case o.SharedNamespace == "":
		return fmt.Errorf("--shared-namespace must not be empty")
	case o.SharedNamespace == o.ManagementNamespace:
		return fmt.Errorf("--shared-namespace must differ from --management-namespace")
	case o.DeployerImage == "":
		return fmt.Errorf("--deployer-image must not be empty")
	case o.Concurrency < 1:
		return fmt.Errorf("--concurrency must be at least 1")
	case o.VerifyInterval < 0:
		return fmt.Errorf("--verify-interval must not be negative")
	case o.DeployerAuthorizationTimeout <= 0:
		return fmt.Errorf("--deployer-authorization-timeout must be positive")
	case !validPodSecurityLevel(o.WorkloadPodSecurity):
		return fmt.Errorf("--workload-pod-security must be one of %s, not %q", strings.Join(PodSecurityLevels, ", "), o.WorkloadPodSecurity)
	}
	if err := o.validateLeaderElection(); err != nil {
		return err
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := o.JobResources.Requests[name]
		limit, hasLimit := o.JobResources.Limits[name]
		if hasReq && hasLimit && req.Cmp(limit) > 0 {
			return fmt.Errorf("--job-%s-request (%s) must not exceed --job-%s-limit (%s)", name, req.String(), name, limit.String())
		}
	}
	return nil
}

// validateLeaderElection refuses timings under which the leader could still
// act after a standby took over (a renew deadline not shorter than the
// lease) or would never retry a renewal (a retry period not shorter than
// the renew deadline).
func (o *Options) validateLeaderElection() error {
	switch {
	case o.LeaseDuration <= 0:
		return fmt.Errorf("--leader-election-lease-duration must be positive")
	case o.RenewDeadline <= 0:
		return fmt.Errorf("--leader-election-renew-deadline must be positive")
	case o.RetryPeriod <= 0:
		return fmt.Errorf("--leader-election-retry-period must be positive")
	case o.RenewDeadline >= o.LeaseDuration:
		return fmt.Errorf("--leader-election-renew-deadline (%s) must be shorter than --leader-election-lease-duration (%s)", o.RenewDeadline, o.LeaseDuration)
	case o.RetryPeriod >= o.RenewDeadline:
		return fmt.Errorf("--leader-election-retry-period (%s) must be shorter than --leader-election-renew-deadline (%s)", o.RetryPeriod, o.RenewDeadline)
	}
	return nil
}

// DefaultJobResources are what every Job's container requests unless the
// flags say otherwise: a tenth of a CPU (a deploy Job is short and waits on
// the API server much of its life) and 128 Mi. No limits: a large chart may
// need more, and a memory limit would kill the deployer halfway through a
// Helm operation.
func DefaultJobResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}}
}

// PodSecurityLevels are the levels --workload-pod-security takes.
var PodSecurityLevels = []string{"privileged", "baseline", "restricted"}

// DefaultWorkloadPodSecurity is the level of an installation that names
// none; the fences assume it too when their ConfigMap has no
// workload-pod-security.
const DefaultWorkloadPodSecurity = "baseline"

// validPodSecurityLevel reports whether level is one of PodSecurityLevels.
func validPodSecurityLevel(level string) bool { return slices.Contains(PodSecurityLevels, level) }

// ProbeInterval is how often each workload cluster is probed.
func (o Options) ProbeInterval() time.Duration {
	if o.ClusterProbeInterval > 0 {
		return o.ClusterProbeInterval
	}
	return 30 * time.Second
}
