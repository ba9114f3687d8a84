package deployer

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/petri-dev/petri/api/contract"
)

// What keeps a release's pods from running, read from their status.
//
// Helm's wait says only that its time ran out. While it waits, the
// deployer reads the pods of the release's workloads (podwatch.go) and
// judges each one here, from its status alone; what it finds names the
// pod, the container and the cause in the deploy's failure, and a problem
// that waiting cannot cure (an image that cannot be pulled, a container
// that keeps crashing, pods the namespace's Pod Security level refuses)
// ends the deploy at once instead of after release.timeout.

// PodProblem is what keeps one pod (or a workload that has no pods) of a
// release from being ready.
type PodProblem struct {
	// Reason is the failure it amounts to: ImagePullFailed,
	// ContainerCrashed, Unschedulable, KubernetesRefused (the API server
	// refused the workload's pods), or Timeout (anything else not ready).
	Reason contract.Reason
	// Object is what it is about: "pod web-5d9c7-x2x4z", or a workload
	// without pods ("Deployment web").
	Object string
	// Container is the container, when one is the cause; Init says it is
	// an init container.
	Container string
	Init      bool
	// Detail says what is wrong, for people.
	Detail string
	// Now is set when waiting cannot help: the deploy fails at once.
	Now bool

	// pod, restarts and probe say what podwatch may add: the last log line
	// of a crashed container, the event of a failing probe.
	pod      string
	restarts int32
	running  bool
	probe    bool
}

// String is the problem in one line: "pod web-5d9c7-x2x4z container app:
// image "x:v1" cannot be pulled: ErrImagePull: ...".
func (p PodProblem) String() string {
	where := p.Object
	switch {
	case p.Container != "" && p.Init:
		where += " init container " + p.Container
	case p.Container != "":
		where += " container " + p.Container
	}
	return where + " " + p.Detail
}

// rank orders problems by how much they explain: the first of a list is
// the one a failure is named after.
func (p PodProblem) rank() int {
	switch p.Reason {
	case contract.ReasonImagePullFailed:
		return 0
	case contract.ReasonContainerCrashed:
		return 1
	case contract.ReasonKubernetesRefused:
		return 2
	case contract.ReasonUnschedulable:
		return 3
	}
	return 4
}

// imagePullReasons are the kubelet's waiting reasons for a container whose
// image it cannot get.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// startingReasons are waiting reasons of a container on its way to run.
var startingReasons = map[string]bool{"ContainerCreating": true, "PodInitializing": true, "": true}

// DiagnosePod says what keeps pod from being ready, from its status alone:
// nil when nothing does (it is ready, finished, or going away). Of several
// containers with problems, the one that explains most is named.
func DiagnosePod(pod *corev1.Pod) *PodProblem {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded {
		return nil
	}
	obj := "pod " + pod.Name
	if pod.Status.Phase == corev1.PodFailed {
		return &PodProblem{Reason: contract.ReasonTimeout, Object: obj, pod: pod.Name, Detail: joinDetail("failed", pod.Status.Reason, pod.Status.Message)}
	}
	if c := podCondition(pod, corev1.PodReady); c != nil && c.Status == corev1.ConditionTrue {
		return nil
	}
	if sched := podCondition(pod, corev1.PodScheduled); sched != nil && sched.Status == corev1.ConditionFalse {
		if sched.Reason == corev1.PodReasonUnschedulable {
			return &PodProblem{Reason: contract.ReasonUnschedulable, Object: obj, pod: pod.Name, Detail: joinDetail("cannot be scheduled", "", sched.Message)}
		}
		return &PodProblem{Reason: contract.ReasonTimeout, Object: obj, pod: pod.Name, Detail: joinDetail("not scheduled", sched.Reason, sched.Message)}
	}
	if pod.Spec.NodeName == "" {
		return &PodProblem{Reason: contract.ReasonTimeout, Object: obj, pod: pod.Name, Detail: "not scheduled yet"}
	}
	var worst *PodProblem
	consider := func(statuses []corev1.ContainerStatus, specs []corev1.Container, init bool) {
		for _, cs := range statuses {
			p := containerProblem(cs, containerSpec(specs, cs.Name), init)
			if p == nil {
				continue
			}
			p.Object, p.pod = obj, pod.Name
			if worst == nil || p.rank() < worst.rank() {
				worst = p
			}
		}
	}
	consider(pod.Status.InitContainerStatuses, pod.Spec.InitContainers, true)
	consider(pod.Status.ContainerStatuses, pod.Spec.Containers, false)
	if worst != nil {
		return worst
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		return &PodProblem{Reason: contract.ReasonTimeout, Object: obj, pod: pod.Name, Detail: "Pending on node " + pod.Spec.NodeName}
	}
	detail := "not ready"
	if c := podCondition(pod, corev1.PodReady); c != nil {
		detail = joinDetail(detail, c.Reason, c.Message)
	}
	return &PodProblem{Reason: contract.ReasonTimeout, Object: obj, pod: pod.Name, Detail: detail}
}

// containerProblem judges one container: nil when it is ready, or an init
// container that finished.
func containerProblem(cs corev1.ContainerStatus, spec *corev1.Container, init bool) *PodProblem {
	p := &PodProblem{Container: cs.Name, Init: init, restarts: cs.RestartCount, running: cs.State.Running != nil}
	w := cs.State.Waiting
	if w != nil && imagePullReasons[w.Reason] {
		p.Reason, p.Now = contract.ReasonImagePullFailed, true
		p.Detail = joinDetail(fmt.Sprintf("image %q cannot be pulled", cs.Image), w.Reason, w.Message)
		return p
	}
	if cs.Ready || (init && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0) {
		return nil
	}
	last := cs.LastTerminationState.Terminated
	if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
		last = t
	}
	if (w != nil && w.Reason == "CrashLoopBackOff") || (last != nil && (cs.RestartCount > 0 || cs.State.Terminated != nil)) {
		// One that runs again after its restarts may be coming up; one
		// that is down again after as many is not.
		p.Reason, p.Now = contract.ReasonContainerCrashed, cs.State.Running == nil && cs.RestartCount >= contract.CrashRestarts
		p.Detail = "crashed (" + restarted(cs.RestartCount)
		if last != nil {
			p.Detail += fmt.Sprintf(", exit code %d", last.ExitCode)
			if last.Reason != "" {
				p.Detail += ", " + last.Reason
			}
		}
		p.Detail += ")"
		return p
	}
	p.Reason = contract.ReasonTimeout
	switch {
	case w != nil && !startingReasons[w.Reason]:
		// CreateContainerConfigError (a Secret or ConfigMap it names is
		// missing), CreateContainerError, RunContainerError, ...
		p.Detail = joinDetail("waiting", w.Reason, w.Message)
	case w != nil:
		p.Detail = joinDetail("waiting", w.Reason, "")
	case init:
		p.Detail = "not finished"
	case cs.Started != nil && !*cs.Started && spec != nil && spec.StartupProbe != nil:
		p.Detail, p.probe = "not started: startup probe failing", true
	case spec != nil && spec.ReadinessProbe != nil:
		p.Detail, p.probe = "not ready: readiness probe failing", true
	default:
		p.Detail = "not ready"
	}
	return p
}

func restarted(n int32) string {
	switch n {
	case 0:
		return "not restarted yet"
	case 1:
		return "restarted once"
	}
	return fmt.Sprintf("restarted %d times", n)
}

// joinDetail is "what: reason: message", leaving out the empty parts.
func joinDetail(what, reason, message string) string {
	for _, s := range []string{reason, strings.TrimSpace(message)} {
		if s != "" {
			what += ": " + s
		}
	}
	return what
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func containerSpec(specs []corev1.Container, name string) *corev1.Container {
	for i := range specs {
		if specs[i].Name == name {
			return &specs[i]
		}
	}
	return nil
}

// podSecurityViolation is how the API server's Pod Security admission words
// its refusal of a pod ("pods "web-x" is forbidden: violates PodSecurity
// "baseline:latest": privileged ..."); a workload controller that keeps
// getting it cannot create its pods until the chart or the namespace's
// level changes.
const podSecurityViolation = "violates PodSecurity"

// refusedPods is the problem of a workload whose controller cannot create
// its pods: the API server refused them (a quota, an admission webhook,
// the namespace's Pod Security level, which no wait changes).
func refusedPods(object, message string) PodProblem {
	return PodProblem{
		Reason: contract.ReasonKubernetesRefused, Object: object,
		Detail: joinDetail("cannot create its pods", "", message),
		Now:    strings.Contains(message, podSecurityViolation),
	}
}

// Problems reads as one line: the one that explains most first, then what
// else is wrong, up to a few more.
func problemsMessage(problems []PodProblem) string {
	if len(problems) == 0 {
		return ""
	}
	msg := problems[0].String()
	var also []string
	for _, p := range problems[1:] {
		if len(also) == maxOtherProblems {
			also = append(also, fmt.Sprintf("%d more", len(problems)-1-maxOtherProblems))
			break
		}
		what := string(p.Reason)
		if p.Reason == contract.ReasonTimeout {
			what = p.Detail
		}
		also = append(also, p.Object+" ("+what+")")
	}
	if len(also) > 0 {
		msg += "; also " + strings.Join(also, ", ")
	}
	return msg
}

// maxOtherProblems bounds how many problems beside the first a message
// names.
const maxOtherProblems = 3

// maxLogLine bounds the quoted log line of a crashed container.
const maxLogLine = 240

var secretAssignment = regexp.MustCompile(`(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|credentials?)(["']?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s,;]+)`)

// logLine is the last line a container wrote, fit for a status and a pull
// request comment: the application's own output, so whitespace is
// collapsed, the user:password@ of URLs and the value of what reads like a
// password=, token: or secret assignment are replaced, and it is cut to
// maxLogLine bytes. Empty when the tail holds no line.
func logLine(tail string) string {
	var line string
	for _, l := range strings.Split(tail, "\n") {
		if strings.TrimSpace(l) != "" {
			line = l
		}
	}
	line = condense(line)
	line = secretAssignment.ReplaceAllString(line, "${1}${2}***")
	return truncate(line, maxLogLine)
}
