package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/internal/benchkit"
)

// Health at rest: what the operator's health watch (--workload-health)
// costs when nothing moves.
//
// N environments of three components (no-op deployer) are created and
// Ready; the benchmark then writes into each one's namespace the three
// Deployments the real deployer would have (the example application's,
// labelled petri.dev/release and with the replicas their release asks for,
// zero here, so that no pod runs), and lets kube-controller-manager take
// them in. Over a window once that settled it reads the operator's memory
// (resident set and Go heap), its own API requests and kube-apiserver's
// from every client: first with the watch off (the operator as it was
// before it), then on, each operator on a control plane of its own. No
// verify Job runs (--verify-interval=0): idle means idle.

// HealthOptions size the health watch's measurement at rest.
type HealthOptions struct {
	// Environments are kept idle, each with three Deployments.
	Environments int
	// Settle is how long the operator is left after the Deployments were
	// taken in before the window; Window how long it is read.
	Settle, Window time.Duration
	// Timeout bounds the wait for all Ready.
	Timeout time.Duration
}

// HealthResult is one side (the watch off or on) at rest.
type HealthResult struct {
	// Watch is the operator's --workload-health.
	Watch bool
	// Environments and Workloads are what was kept.
	Environments, Workloads int
	// AllReady is from the first create to the last environment Ready.
	AllReady time.Duration
	// Window is how long the figures were read.
	Window time.Duration
	// OperatorRequests are the operator's own requests in the window
	// (petri_api_requests_total), by verb and resource; APIRequests
	// kube-apiserver's from every client, without Lease and Node requests.
	OperatorRequests map[[2]string]float64
	APIRequests      float64
	// Reconciles are the environment controller's passes in the window.
	Reconciles float64
	// RSS is the operator's resident set at the end of the window, PeakRSS
	// its high-water mark, HeapInuse its Go heap in use.
	RSS, PeakRSS, HeapInuse int64
	// CPU is the operator's CPU time in the window.
	CPU time.Duration
	// Phases counts the environments by phase at the end.
	Phases                map[petriv1.EnvironmentPhase]int
	LoadBefore, LoadAfter string
}

// perMinute is a count of the window per minute.
func (r HealthResult) perMinute(v float64) float64 {
	return v / r.Window.Minutes()
}

// OperatorRequestsPerMinute are the operator's requests per minute.
func (r HealthResult) OperatorRequestsPerMinute() float64 {
	total := 0.0
	for _, v := range r.OperatorRequests {
		total += v
	}
	return r.perMinute(total)
}

// health measures the operator with the health watch off, then on.
func health(ctx context.Context, o HealthOptions, dir string, bins map[string]string, logf func(string, ...any)) ([]HealthResult, error) {
	var out []HealthResult
	for _, watch := range []bool{false, true} {
		logf("health at rest, --workload-health=%t: %d environments × 3 Deployments, window %s", watch, o.Environments, o.Window)
		r, err := healthSide(ctx, o, watch, fmt.Sprintf("%s/health-%t", dir, watch), bins, logf)
		out = append(out, r)
		if err != nil {
			return out, fmt.Errorf("--workload-health=%t: %w", watch, err)
		}
		logf("health at rest, --workload-health=%t: operator RSS %d MiB, heap %d MiB, %.1f operator requests/min, %.0f kube-apiserver requests/min, %.0f passes in %s; phases %v",
			watch, r.RSS>>20, r.HeapInuse>>20, r.OperatorRequestsPerMinute(), r.perMinute(r.APIRequests), r.Reconciles, o.Window, r.Phases)
	}
	return out, nil
}

func healthSide(ctx context.Context, o HealthOptions, watch bool, dir string, bins map[string]string, logf func(string, ...any)) (res HealthResult, err error) {
	res.Watch, res.Window, res.LoadBefore = watch, o.Window, benchkit.LoadAverage()
	e, err := startEnv(ctx, dir, bins, logf)
	if err != nil {
		return res, err
	}
	defer e.stop()
	op, err := e.startOperator(ctx, fmt.Sprintf("health-%t", watch), NoopDeployerImage, 0,
		"--verify-interval=0", fmt.Sprintf("--workload-health=%t", watch))
	if err != nil {
		return res, err
	}
	defer op.stop()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	names, allReady, err := e.createReady(tctx, "health", o.Environments, o.Timeout)
	if err != nil {
		return res, err
	}
	res.AllReady = allReady
	res.Environments = len(names)
	logf("health at rest: all %d Ready in %s; writing their Deployments", len(names), secs(res.AllReady))
	if res.Workloads, err = e.writeWorkloads(ctx, names); err != nil {
		return res, err
	}
	if err := e.waitWorkloadsObserved(ctx, res.Workloads, o.Timeout); err != nil {
		return res, err
	}
	if err := pause(ctx, o.Settle); err != nil {
		return res, err
	}
	if err := e.readHealthWindow(ctx, op, o.Window, &res); err != nil {
		return res, err
	}
	res.Phases = map[petriv1.EnvironmentPhase]int{}
	var list petriv1.EphemeralEnvironmentList
	if err := e.cluster.Client.List(ctx, &list, client.InNamespace(managementNamespace)); err != nil {
		return res, err
	}
	for _, ee := range list.Items {
		res.Phases[ee.Status.Phase]++
	}
	res.LoadAfter = benchkit.LoadAverage()
	return res, nil
}

// writeWorkloads writes each environment's three Deployments into its
// namespace, as the real deployer's install of the example chart would
// (replicas 0, the benchmark environment's values).
func (e *env) writeWorkloads(ctx context.Context, names []string) (int, error) {
	var list petriv1.EphemeralEnvironmentList
	if err := e.cluster.Client.List(ctx, &list, client.InNamespace(managementNamespace)); err != nil {
		return 0, err
	}
	var deployments []*appsv1.Deployment
	for _, ee := range list.Items {
		if !strings.HasPrefix(ee.Name, "health-") || ee.Status.TargetNamespace == "" {
			continue
		}
		for _, c := range ee.Spec.Components {
			deployments = append(deployments, exampleDeployment(ee.Status.TargetNamespace, c.Name))
		}
	}
	if len(deployments) != 3*len(names) {
		return 0, fmt.Errorf("%d Deployments for %d environments: some have no namespace", len(deployments), len(names))
	}
	err := benchkit.ForEach(ctx, deployments, 16, func(d *appsv1.Deployment) error {
		return e.cluster.Client.Create(ctx, d)
	})
	return len(deployments), err
}

// exampleDeployment is the example chart's Deployment of a release, as the
// deployer writes it.
func exampleDeployment(namespace, release string) *appsv1.Deployment {
	labels := map[string]string{
		"app.kubernetes.io/name": "example-app", "app.kubernetes.io/instance": release,
		"app.kubernetes.io/version": "0.1.0", "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "example-app-0.1.0",
	}
	selector := map[string]string{"app.kubernetes.io/name": "example-app", "app.kubernetes.io/instance": release}
	meta := metav1.ObjectMeta{Namespace: namespace, Name: release, Labels: map[string]string{contract.LabelRelease: release},
		Annotations: map[string]string{contract.AnnotationReplicas: "0", "meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}}
	for k, v := range labels {
		meta.Labels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "app", Image: "petri.dev/example-app:0.1.0", ImagePullPolicy: corev1.PullIfNotPresent,
						Args:  []string{"serve", "--listen=:8080"},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
							PeriodSeconds: 5},
						Env: []corev1.EnvVar{{Name: "MESSAGE", Value: "Hello from Petri"}, {Name: "COMMIT", Value: "0123456789abcdef0123456789abcdef01234567"}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
					}},
				},
			},
		},
	}
}

// waitWorkloadsObserved waits until kube-controller-manager has taken in
// every Deployment written (its status speaks of its generation).
func (e *env) waitWorkloadsObserved(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list appsv1.DeploymentList
		if err := e.cluster.Client.List(ctx, &list, client.HasLabels{contract.LabelRelease}); err != nil {
			return err
		}
		observed := 0
		for _, d := range list.Items {
			if d.Status.ObservedGeneration == d.Generation {
				observed++
			}
		}
		if observed >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Deployments observed by kube-controller-manager within %s", observed, n, timeout)
		}
		if err := pause(ctx, time.Second); err != nil {
			return err
		}
	}
}

// readHealthWindow reads the operator's and kube-apiserver's figures over
// the window.
func (e *env) readHealthWindow(ctx context.Context, op *operator, window time.Duration, res *HealthResult) error {
	apiBefore, err := e.apiServerMetrics(ctx)
	if err != nil {
		return err
	}
	opBefore, err := op.apiRequests()
	if err != nil {
		return err
	}
	passesBefore, err := op.reconciles()
	if err != nil {
		return err
	}
	cpuBefore := op.cpuNow()
	if err := pause(ctx, window); err != nil {
		return err
	}
	res.CPU = op.cpuNow() - cpuBefore
	apiAfter, err := e.apiServerMetrics(ctx)
	if err != nil {
		return err
	}
	opAfter, err := op.apiRequests()
	if err != nil {
		return err
	}
	passesAfter, err := op.reconciles()
	if err != nil {
		return err
	}
	res.Reconciles = passesAfter - passesBefore
	res.OperatorRequests = map[[2]string]float64{}
	for k, v := range opAfter {
		if d := v - opBefore[k]; d > 0 {
			res.OperatorRequests[k] = d
		}
	}
	for k, v := range apiServerRequestsByResource(apiBefore, apiAfter, 1) {
		if k[1] != "leases" && k[1] != "nodes" && !strings.HasPrefix(k[1], "nodes/") && k[1] != "" {
			res.APIRequests += v
		}
	}
	if res.RSS, err = op.rss(); err != nil {
		return err
	}
	if res.PeakRSS, err = op.peakRSS(); err != nil {
		return err
	}
	m, err := op.metrics()
	if err != nil {
		return err
	}
	res.HeapInuse = int64(m["go_memstats_heap_inuse_bytes"])
	return nil
}

// reconciles is the environment controller's passes so far.
func (o *operator) reconciles() (float64, error) {
	m, err := o.metrics()
	if err != nil {
		return 0, err
	}
	total := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "controller_runtime_reconcile_total{") && strings.Contains(k, `controller="ephemeralenvironment"`) {
			total += v
		}
	}
	return total, nil
}

// writeHealthTable prints the health watch's figures at rest.
func (r *Results) writeHealthTable(w io.Writer) {
	if len(r.Health) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "health at rest\tenvironments\tDeployments\toperator RSS\tpeak RSS\tGo heap\toperator requests/min\tkube-apiserver requests/min\tpasses/min\tphases")
	for _, h := range r.Health {
		fmt.Fprintf(tw, "--workload-health=%t\t%d\t%d\t%d MiB\t%d MiB\t%d MiB\t%.1f\t%.0f\t%.1f\t%v\n", h.Watch, h.Environments, h.Workloads,
			h.RSS>>20, h.PeakRSS>>20, h.HeapInuse>>20, h.OperatorRequestsPerMinute(), h.perMinute(h.APIRequests), h.perMinute(h.Reconciles), h.Phases)
	}
	tw.Flush()
}
