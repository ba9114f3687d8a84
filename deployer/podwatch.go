package deployer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/petri-dev/petri/api/contract"
)

// diagnosePoll is how often the release's pods are diagnosed while a deploy
// waits for them, and the longest its readiness checks go without a look
// (they look at every change of a watched object); Helm's own wait polls
// as often.
const diagnosePoll = 2 * time.Second

// Bounds of the log read of a crashed container (pods/log).
const (
	logTailLines  = 5
	logLimitBytes = 16 << 10
)

// readTimeout bounds each read that explains a failure.
const readTimeout = 10 * time.Second

// PodsError is a deploy's wait that failed because of the release's pods:
// given up at once for a problem that no wait cures (PodProblem.Now), or
// at the end of release.timeout. Its Reason is the first problem's, the
// one that explains most.
type PodsError struct {
	Reason contract.Reason
	// Timeout is the wait's timeout when it elapsed; zero when the deploy
	// gave up at once.
	Timeout time.Duration
	// Problems are what kept the release's pods from being ready, the one
	// that explains most first.
	Problems []PodProblem
	// cause is Helm's error when its wait timed out.
	cause error
}

// Error is "release.timeout 2m0s elapsed; pod web-x container app not
// ready: readiness probe failing" after a timeout, the problems alone
// when the deploy gave up at once.
func (e *PodsError) Error() string {
	msg := problemsMessage(e.Problems)
	switch {
	case e.Timeout == 0:
		return msg
	case msg == "" && e.cause != nil:
		return fmt.Sprintf("release.timeout %s elapsed: %v", e.Timeout, e.cause)
	case msg == "":
		return fmt.Sprintf("release.timeout %s elapsed", e.Timeout)
	}
	return fmt.Sprintf("release.timeout %s elapsed; %s", e.Timeout, msg)
}

func (e *PodsError) Unwrap() error { return e.cause }

// podWatch is Helm's kube client for one operation on a release, whose
// waits make Helm's readiness checks over watches of the release's
// namespace (watchedReads) and watch the release's pods meanwhile: a
// problem that no wait cures ends the wait at once, failing the Helm
// operation as a timeout would (the release is recorded failed, with this
// message), and a wait that times out names what was not ready.
type podWatch struct {
	*kube.Client
	ctx       context.Context
	cs        kubernetes.Interface
	namespace string
}

// IsReachable is Helm's check that the API server answers, which each
// action makes first with a request of its own (GET /version). A podWatch
// serves one operation, made after the deployer took the release's lock
// from that API server: it has just answered.
func (w *podWatch) IsReachable() error { return nil }

// Wait is Helm's wait for the release's resources, watched.
func (w *podWatch) Wait(resources kube.ResourceList, timeout time.Duration) error {
	return w.wait(resources, timeout, false)
}

// WaitWithJobs is Helm's wait including Jobs, watched.
func (w *podWatch) WaitWithJobs(resources kube.ResourceList, timeout time.Duration) error {
	return w.wait(resources, timeout, true)
}

// wait is Helm's wait, its readiness checks (kube.ReadyChecker, the same
// options) made over watchedReads: they look again whenever a watched
// object changed, and at least every diagnosePoll, instead of reading
// every object anew every 2 seconds. Every diagnosePoll the pods are
// diagnosed as well.
func (w *podWatch) wait(resources kube.ResourceList, timeout time.Duration, jobs bool) error {
	log := logr.FromContextOrDiscard(w.ctx)
	objects := releaseObjects(resources)
	waitFor := notReadyByAnswer(resources)
	reads := newWatchedReads(w.cs, w.namespace)
	defer reads.stopWatching()
	checker := kube.NewReadyChecker(reads, w.Client.Log, kube.PausedAsReady(true), kube.CheckJobs(jobs))
	pods := NewPodDiagnosis(reads, w.namespace)
	ctx, cancel := context.WithTimeout(w.ctx, timeout)
	defer cancel()
	tick := time.NewTicker(diagnosePoll)
	defer tick.Stop()
	var reported string
	for {
		ready, err := allReady(ctx, checker, waitFor)
		switch {
		case ready:
			return nil
		case err != nil && ctx.Err() == nil && !retryable(err):
			return pods.timedOut(w.ctx, objects, timeout, err)
		}
		select {
		case <-ctx.Done():
			if w.ctx.Err() != nil {
				return context.Cause(w.ctx)
			}
			return pods.timedOut(w.ctx, objects, timeout, ctx.Err())
		case <-reads.changed:
			continue
		case <-tick.C:
		}
		problems, err := pods.Diagnose(ctx, objects, false)
		if err != nil {
			log.Info("Cannot read the release's pods; the wait goes on", "error", err.Error())
			continue
		}
		if i := slices.IndexFunc(problems, func(p PodProblem) bool { return p.Now }); i >= 0 {
			first := problems[i]
			problems = append([]PodProblem{first}, slices.Delete(problems, i, i+1)...)
			err := pods.failure(w.ctx, problems, 0, nil)
			log.Info("Giving up the wait: the release's pods cannot become ready", "reason", problems[0].Reason, "message", err.Error())
			return err
		}
		if msg := problemsMessage(problems); msg != reported {
			log.Info("Waiting for the release's pods", "notReady", msg)
			reported = msg
		}
	}
}

// allReady is what Helm's wait asks each time it looks: whether every
// resource is ready, in order, the first one that is not ending the look.
func allReady(ctx context.Context, checker kube.ReadyChecker, resources kube.ResourceList) (bool, error) {
	for _, info := range resources {
		if ok, err := checker.IsReady(ctx, info); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// retryable is an error of a readiness check that Helm's wait looks past:
// one that is not the API server's answer, or is a 429 or a 5xx other than
// 501.
func retryable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	code := status.Status().Code
	return code == 0 || code == http.StatusTooManyRequests || (code >= 500 && code != http.StatusNotImplemented)
}

// notReadyByAnswer leaves out of resources those whose readiness Helm's
// wait would read back from the API server each time it looks, only to
// find what the API server's answer to their create or patch (which Helm
// keeps in the resource) already said: a Service that is not a
// LoadBalancer is ready once it has its cluster IP (an ExternalName one at
// once), which is assigned when it is created and never changes.
func notReadyByAnswer(resources kube.ResourceList) kube.ResourceList {
	out := make(kube.ResourceList, 0, len(resources))
	for _, info := range resources {
		if svc, ok := kube.AsVersioned(info).(*corev1.Service); ok && svc.Spec.Type != corev1.ServiceTypeLoadBalancer &&
			(svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP != "") {
			continue
		}
		out = append(out, info)
	}
	return out
}

// ReleaseObject is one object of a release the diagnosis reads.
type ReleaseObject struct {
	// Kind is Deployment, StatefulSet, DaemonSet, ReplicaSet, Pod,
	// PersistentVolumeClaim or Service.
	Kind, Name string
}

// releaseObjects are the objects of resources whose readiness Helm waits
// for and the diagnosis can explain.
func releaseObjects(resources kube.ResourceList) []ReleaseObject {
	var out []ReleaseObject
	for _, info := range resources {
		if info.Mapping == nil {
			continue
		}
		gvk := info.Mapping.GroupVersionKind
		switch {
		case gvk.Group == "apps" && slices.Contains([]string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"}, gvk.Kind),
			gvk.Group == "" && slices.Contains([]string{"Pod", "PersistentVolumeClaim", "Service"}, gvk.Kind):
			out = append(out, ReleaseObject{Kind: gvk.Kind, Name: info.Name})
		}
	}
	return out
}

// PodDiagnosis reads a release's workloads and their pods in its
// namespace, as a deploy's wait does, and judges them (DiagnosePod).
type PodDiagnosis struct {
	cs        kubernetes.Interface
	namespace string
}

// NewPodDiagnosis reads the release objects of namespace through cs.
func NewPodDiagnosis(cs kubernetes.Interface, namespace string) *PodDiagnosis {
	return &PodDiagnosis{cs: cs, namespace: namespace}
}

// timedOut is the failure of a wait that ran out of time: what was not
// ready then.
func (r *PodDiagnosis) timedOut(ctx context.Context, objects []ReleaseObject, timeout time.Duration, cause error) error {
	read, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	problems, err := r.Diagnose(read, objects, true)
	if err != nil {
		return fmt.Errorf("release.timeout %s elapsed; the release's pods could not be read (%v): %w", timeout, err, cause)
	}
	if len(problems) == 0 {
		return &PodsError{Reason: contract.ReasonTimeout, Timeout: timeout, cause: cause}
	}
	return r.failure(ctx, problems, timeout, cause)
}

// failure explains the first problem further (a crashed container's last
// log line, a failing probe's event) and makes the error.
func (r *PodDiagnosis) failure(ctx context.Context, problems []PodProblem, timeout time.Duration, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	p := &problems[0]
	switch {
	case p.Reason == contract.ReasonContainerCrashed && p.pod != "":
		p.Detail += "; " + r.lastLogLine(ctx, p.pod, p.Container, p.crashedRunIsPrevious())
	case p.probe:
		if msg := r.probeEvent(ctx, p.pod); msg != "" {
			p.Detail += ": " + msg
		}
	}
	return &PodsError{Reason: p.Reason, Timeout: timeout, Problems: problems, cause: cause}
}

// Diagnose reads objects and their pods afresh and judges them, the
// problem that explains most first. final adds what only a wait that ended
// reports: workloads whose controllers have not caught up, claims not
// bound, load balancers without an address. An object that is gone is
// skipped.
func (r *PodDiagnosis) Diagnose(ctx context.Context, objects []ReleaseObject, final bool) ([]PodProblem, error) {
	s := &snapshot{r: r, ctx: ctx}
	var out []PodProblem
	for _, o := range objects {
		ps, err := s.problems(o, final)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.Kind, o.Name, err)
		}
		out = append(out, ps...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].rank() < out[j].rank() })
	return out, nil
}

// snapshot is one reading of the release's namespace: its pods and
// ReplicaSets are listed once, when first needed.
type snapshot struct {
	r    *PodDiagnosis
	ctx  context.Context
	pods *corev1.PodList
	sets *appsv1.ReplicaSetList
}

func (s *snapshot) problems(o ReleaseObject, final bool) ([]PodProblem, error) {
	apps, core := s.r.cs.AppsV1(), s.r.cs.CoreV1()
	ns, get := s.r.namespace, metav1.GetOptions{}
	switch o.Kind {
	case "Deployment":
		d, err := apps.Deployments(ns).Get(s.ctx, o.Name, get)
		if err != nil {
			return nil, err
		}
		return s.deployment(d, final)
	case "StatefulSet":
		st, err := apps.StatefulSets(ns).Get(s.ctx, o.Name, get)
		if err != nil {
			return nil, err
		}
		if st.Status.ObservedGeneration < st.Generation {
			return behind("StatefulSet "+st.Name, final), nil
		}
		return s.controlled("StatefulSet "+st.Name, st.UID, replicas(st.Spec.Replicas), final, func(p *corev1.Pod) bool {
			return st.Status.UpdateRevision == "" || p.Labels[appsv1.ControllerRevisionHashLabelKey] == st.Status.UpdateRevision
		})
	case "DaemonSet":
		ds, err := apps.DaemonSets(ns).Get(s.ctx, o.Name, get)
		if err != nil {
			return nil, err
		}
		if ds.Status.ObservedGeneration < ds.Generation {
			return behind("DaemonSet "+ds.Name, final), nil
		}
		return s.controlled("DaemonSet "+ds.Name, ds.UID, ds.Status.DesiredNumberScheduled, final, nil)
	case "ReplicaSet":
		rs, err := apps.ReplicaSets(ns).Get(s.ctx, o.Name, get)
		if err != nil {
			return nil, err
		}
		return s.replicaSet("ReplicaSet "+rs.Name, rs, final)
	case "Pod":
		pod, err := core.Pods(ns).Get(s.ctx, o.Name, get)
		if err != nil {
			return nil, err
		}
		if p := DiagnosePod(pod); p != nil {
			return []PodProblem{*p}, nil
		}
	case "PersistentVolumeClaim":
		if !final {
			return nil, nil
		}
		pvc, err := core.PersistentVolumeClaims(ns).Get(s.ctx, o.Name, get)
		if err != nil {
			return nil, err
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return []PodProblem{{Reason: contract.ReasonTimeout, Object: "PersistentVolumeClaim " + pvc.Name, Detail: fmt.Sprintf("is %s, not Bound", pvc.Status.Phase)}}, nil
		}
	case "Service":
		if !final {
			return nil, nil
		}
		svc, err := core.Services(ns).Get(s.ctx, o.Name, get)
		if err != nil {
			return nil, err
		}
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) == 0 {
			return []PodProblem{{Reason: contract.ReasonTimeout, Object: "Service " + svc.Name, Detail: "has no load balancer address yet"}}, nil
		}
	}
	return nil, nil
}

// deployment judges the pods of the Deployment's ReplicaSet of its latest
// revision only: pods of an older one are on their way out, and one that
// failed before the deploy fixed it says nothing about the deploy.
func (s *snapshot) deployment(d *appsv1.Deployment, final bool) ([]PodProblem, error) {
	obj := "Deployment " + d.Name
	if d.Status.ObservedGeneration < d.Generation {
		return behind(obj, final), nil
	}
	var out []PodProblem
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
			out = append(out, refusedPods(obj, c.Message))
		}
	}
	if s.sets == nil {
		sets, err := s.r.cs.AppsV1().ReplicaSets(s.r.namespace).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		s.sets = sets
	}
	const revision = "deployment.kubernetes.io/revision"
	for i := range s.sets.Items {
		rs := &s.sets.Items[i]
		if owner := metav1.GetControllerOf(rs); owner != nil && owner.UID == d.UID && rs.Annotations[revision] == d.Annotations[revision] {
			ps, err := s.replicaSet(obj, rs, final)
			if len(out) > 0 {
				// The Deployment's copy of the refusal is enough.
				ps = slices.DeleteFunc(ps, func(p PodProblem) bool { return p.Reason == contract.ReasonKubernetesRefused && p.pod == "" })
			}
			return append(out, ps...), err
		}
	}
	if final && len(out) == 0 && replicas(d.Spec.Replicas) > 0 {
		out = append(out, PodProblem{Reason: contract.ReasonTimeout, Object: obj, Detail: "has no ReplicaSet of its latest revision"})
	}
	return out, nil
}

func (s *snapshot) replicaSet(obj string, rs *appsv1.ReplicaSet, final bool) ([]PodProblem, error) {
	var out []PodProblem
	for _, c := range rs.Status.Conditions {
		if c.Type == appsv1.ReplicaSetReplicaFailure && c.Status == corev1.ConditionTrue {
			out = append(out, refusedPods(obj, c.Message))
		}
	}
	ps, err := s.controlled(obj, rs.UID, replicas(rs.Spec.Replicas), final && len(out) == 0, nil)
	return append(out, ps...), err
}

// controlled judges the pods that owner controls (those that current
// accepts, all when nil). When fewer exist than it wants, the owner's
// latest FailedCreate event says why, and a final reading says how many.
func (s *snapshot) controlled(obj string, owner types.UID, want int32, final bool, current func(*corev1.Pod) bool) ([]PodProblem, error) {
	if s.pods == nil {
		pods, err := s.r.cs.CoreV1().Pods(s.r.namespace).List(s.ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		s.pods = pods
	}
	var out []PodProblem
	var have int32
	for i := range s.pods.Items {
		pod := &s.pods.Items[i]
		if c := metav1.GetControllerOf(pod); c == nil || c.UID != owner || pod.DeletionTimestamp != nil || (current != nil && !current(pod)) {
			continue
		}
		have++
		if p := DiagnosePod(pod); p != nil {
			out = append(out, *p)
		}
	}
	if have >= want {
		return out, nil
	}
	if msg := s.r.newestEvent(s.ctx, fields.Set{"involvedObject.uid": string(owner), "reason": "FailedCreate"}); msg != "" {
		return append(out, refusedPods(obj, msg)), nil
	}
	if final {
		out = append(out, PodProblem{Reason: contract.ReasonTimeout, Object: obj, Detail: fmt.Sprintf("has %d of %d pods", have, want)})
	}
	return out, nil
}

// behind is the problem of a workload whose controller has not acted on
// its latest spec yet: none while the wait goes on (its pods are not the
// deploy's yet), and a problem once it ended.
func behind(obj string, final bool) []PodProblem {
	if !final {
		return nil
	}
	return []PodProblem{{Reason: contract.ReasonTimeout, Object: obj, Detail: "has not been acted on by its controller"}}
}

func replicas(n *int32) int32 { return ptr.Deref(n, 1) }

// errLogGone is a run whose log kubelet no longer has.
var errLogGone = errors.New("log gone")

// crashedRunIsPrevious says which run of a crashed container holds the
// crash: the previous one when it runs again after a restart, else its
// latest run, which has exited (kubelet keeps few exited runs: the one
// before it may be gone).
func (p *PodProblem) crashedRunIsPrevious() bool { return p.running && p.restarts > 0 }

// kubeletLogGone is how kubelet answers, inside a 200 answer, for a run
// whose container or log it no longer has.
const kubeletLogGone = "unable to retrieve container logs for "

// lastLogLine is "last log line: "..."" of a container, from the run
// previous says (pods/log, bounded by logTailLines and logLimitBytes), or
// from the other run when that one's log is gone, or why there is none.
func (r *PodDiagnosis) lastLogLine(ctx context.Context, pod, container string, previous bool) string {
	read := func(previous bool) ([]byte, error) {
		return r.cs.CoreV1().Pods(r.namespace).GetLogs(pod, &corev1.PodLogOptions{
			Container: container, Previous: previous,
			TailLines: ptr.To[int64](logTailLines), LimitBytes: ptr.To[int64](logLimitBytes),
		}).DoRaw(ctx)
	}
	return logLineOf(read, previous)
}

// logLineOf reads the last log line of the run previous says with read,
// and of the other run when that one's log is gone.
func logLineOf(read func(previous bool) ([]byte, error), previous bool) string {
	readRun := func(previous bool) ([]byte, error) {
		data, err := read(previous)
		if err == nil && strings.HasPrefix(string(data), kubeletLogGone) {
			err = errLogGone
		}
		return data, err
	}
	data, err := readRun(previous)
	if err != nil {
		// That run's log may be gone; the other run may tell.
		data, err = readRun(!previous)
	}
	if errors.Is(err, errLogGone) {
		return "no log line read (kubelet no longer has the container's log)"
	}
	if err != nil {
		why := string(apierrors.ReasonForError(err))
		if why == "" {
			why = "unavailable"
		}
		if errors.Is(err, context.DeadlineExceeded) {
			why = "timed out"
		}
		return "no log line read (" + why + ")"
	}
	line := logLine(string(data))
	if line == "" {
		return "it logged nothing"
	}
	return fmt.Sprintf("last log line: %q", line)
}

// probeEvent is the message of the pod's latest Unhealthy event ("Readiness
// probe failed: HTTP probe failed with statuscode: 503"), cut like a log
// line; empty when there is none.
func (r *PodDiagnosis) probeEvent(ctx context.Context, pod string) string {
	return logLine(r.newestEvent(ctx, fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": pod, "reason": "Unhealthy"}))
}

// newestEvent is the message of the newest event matching sel in the
// namespace; empty when there is none or the events cannot be read.
func (r *PodDiagnosis) newestEvent(ctx context.Context, sel fields.Set) string {
	list, err := r.cs.CoreV1().Events(r.namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil || len(list.Items) == 0 {
		return ""
	}
	newest := slices.MaxFunc(list.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	return newest.Message
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
