package contract

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Reason says why a deployer run failed, or what a verification found. It is
// a closed, stable set: the operator copies it into the status, where a user
// can act on VersionNotFound, not on a Go error string. Each one points at
// who has to act: the config repository (chart, version, values), the
// cluster admin (RBAC, the cluster's version), the chart's workload
// (timeout) or the chart publisher (digest, templates).
type Reason string

// The reasons a deployer run fails with.
const (
	// ReasonChartNotFound: the repository, registry or path has no such chart.
	ReasonChartNotFound Reason = "ChartNotFound"
	// ReasonVersionNotFound: the chart exists but not at the requested version.
	ReasonVersionNotFound Reason = "VersionNotFound"
	// ReasonValuesInvalid: the values do not parse or fail values.schema.json.
	ReasonValuesInvalid Reason = "ValuesInvalid"
	// ReasonKubernetesRefused: the API server rejected a request (RBAC,
	// admission, validation).
	ReasonKubernetesRefused Reason = "KubernetesRefused"
	// ReasonTimeout: the release did not become ready within --timeout
	// (release.timeout); the message names the pods that were not ready
	// and why (a readiness probe failing, a container still waiting).
	ReasonTimeout Reason = "Timeout"
	// ReasonImagePullFailed: a container of the release's pods cannot get
	// its image (ErrImagePull, ImagePullBackOff, InvalidImageName); the
	// message names the pod, the container, the image and the error the
	// kubelet reported. The deploy fails as soon as it is seen.
	ReasonImagePullFailed Reason = "ImagePullFailed"
	// ReasonContainerCrashed: a container of the release's pods keeps
	// exiting (CrashLoopBackOff); the message names the pod, the
	// container, its exit code and the last line it logged. The deploy
	// fails once the container has been restarted CrashRestarts times, or
	// when the wait ends while it crashes.
	ReasonContainerCrashed Reason = "ContainerCrashed"
	// ReasonUnschedulable: the wait ended while a pod of the release could
	// not be scheduled (PodScheduled False, Unschedulable); the message
	// names the pod and the scheduler's message. The deploy waits for the
	// whole timeout first, since a cluster may add nodes meanwhile.
	ReasonUnschedulable Reason = "Unschedulable"
	// ReasonDigestMismatch: the downloaded archive is not the one the
	// repository index describes.
	ReasonDigestMismatch Reason = "DigestMismatch"
	// ReasonInvalidArguments: the Job was built wrong; an operator bug.
	ReasonInvalidArguments Reason = "InvalidArguments"
	// ReasonKubeVersionIncompatible: the chart's kubeVersion constraint
	// excludes the cluster's Kubernetes version.
	ReasonKubeVersionIncompatible Reason = "KubeVersionIncompatible"
	// ReasonRequiredValueMissing: a template's `required` found its value
	// missing or empty.
	ReasonRequiredValueMissing Reason = "RequiredValueMissing"
	// ReasonRenderFailed: the chart's templates do not render with these
	// values (a template error, `fail`, or output that is not YAML).
	ReasonRenderFailed Reason = "RenderFailed"
	// ReasonFailed: anything else.
	ReasonFailed Reason = "Failed"
)

// The reasons of a verification's findings.
const (
	// ReasonReleaseMissing: the release has no record, or only an
	// uninstalled one.
	ReasonReleaseMissing Reason = "ReleaseMissing"
	// ReasonRevisionMismatch: the latest record is at another revision than
	// the deploy reported, or is not deployed (failed, pending).
	ReasonRevisionMismatch Reason = "RevisionMismatch"
)

// reasons is the closed set; a decoded result with any other reason reads
// as ReasonFailed.
var reasons = map[Reason]bool{
	ReasonChartNotFound: true, ReasonVersionNotFound: true, ReasonValuesInvalid: true,
	ReasonKubernetesRefused: true, ReasonTimeout: true, ReasonDigestMismatch: true,
	ReasonInvalidArguments: true, ReasonKubeVersionIncompatible: true, ReasonRequiredValueMissing: true,
	ReasonRenderFailed: true, ReasonFailed: true, ReasonReleaseMissing: true, ReasonRevisionMismatch: true,
	ReasonImagePullFailed: true, ReasonContainerCrashed: true, ReasonUnschedulable: true,
}

// CrashRestarts is how many restarts of a crashing container a deploy that
// waits sees before it fails with ReasonContainerCrashed: a container that
// exits once, while what it needs comes up, is given the time of a few
// kubelet back-offs to recover by itself.
const CrashRestarts = 3

// Final reports whether running the same Job again cannot change the
// outcome by itself. Either its cause is the chart, the values, the
// cluster's version or the Job's own arguments, which a retry does not
// change; or it is the release's own pods that cannot run
// (ImagePullFailed, ContainerCrashed), which a new Job of the same spec
// deploys unchanged while the kubelet already keeps pulling and restarting
// them by itself: another Job would only watch them fail again. (An image
// pushed later, or a dependency that comes up, lets those pods run without
// any Job; the environment says so after its next deploy.)
// A final failure ends its Job at once instead of costing backoffLimit more
// pods, and the operator starts no new Job for it; a new generation of the
// environment (other values, another image, another chart version) or a
// redeploy is what moves it. Everything else (API refusals, timeouts, pods
// that cannot be scheduled yet, unreachable repositories, charts not yet
// published) may pass on a retry.
func (r Reason) Final() bool {
	switch r {
	case ReasonInvalidArguments, ReasonValuesInvalid, ReasonKubeVersionIncompatible,
		ReasonRequiredValueMissing, ReasonRenderFailed,
		ReasonImagePullFailed, ReasonContainerCrashed:
		return true
	}
	return false
}

// Retryable reports whether a new Job of the same spec may succeed where
// this one failed: not for a Final reason, and not for a chart or version
// that is not found. The Job itself retries the latter with another pod,
// since a chart may be published a moment later; the operator starts no new
// Jobs for them, since that is what a new generation (another version) is
// for.
func (r Reason) Retryable() bool {
	return !r.Final() && r != ReasonChartNotFound && r != ReasonVersionNotFound
}

// Outcome is how a deployer run ended.
type Outcome string

const (
	// OutcomeSucceeded: the action did what it was asked.
	OutcomeSucceeded Outcome = "Succeeded"
	// OutcomeFailed: the action failed with Reason.
	OutcomeFailed Outcome = "Failed"
	// OutcomeDrifted: a verification read the releases and found Drifted
	// not as their deploys left them.
	OutcomeDrifted Outcome = "Drifted"
)

// Result is the deployer's termination message, as JSON.
type Result struct {
	// Action is the deployer command that ran (ActionDeploy, ...).
	Action string `json:"action"`
	// Outcome is how it ended.
	Outcome Outcome `json:"outcome"`
	// Reason says why it failed, or what a verification found first.
	Reason Reason `json:"reason,omitempty"`
	// Retryable says a new Job of the same spec may succeed (Reason.Retryable);
	// false for a success.
	Retryable bool `json:"retryable,omitempty"`
	// Revision is the Helm release revision a deploy made.
	Revision int `json:"revision,omitempty"`
	// Drifted are the releases a verification found missing or moved.
	Drifted []string `json:"drifted,omitempty"`
	// Message is one line for people ("VersionNotFound: chart web version
	// 9.9.9 not in ...", "Deployed: revision 4"); never parsed.
	Message string `json:"message,omitempty"`
}

// MaxBytes bounds the encoded result: Kubernetes keeps at most 4096 bytes of
// a container's termination message.
const MaxBytes = 4096

// Encode renders r as JSON of at most MaxBytes: the message is cut first,
// then drifted releases beyond what fits (the message still names them).
// The JSON itself is never cut.
func Encode(r Result) string {
	out := marshal(r)
	for len(out) > MaxBytes && r.Message != "" {
		if n := len(r.Message) - (len(out) - MaxBytes); n > len(ellipsis) {
			r.Message = Truncate(r.Message, n)
		} else {
			r.Message = ""
		}
		out = marshal(r)
	}
	for len(out) > MaxBytes && len(r.Drifted) > 0 {
		r.Drifted = r.Drifted[:len(r.Drifted)-1]
		out = marshal(r)
	}
	return out
}

func marshal(r Result) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		// A Result holds strings, numbers and bools only.
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Decode reads a termination message as a Result. ok is false for anything
// that is not one (a container that is not the deployer, a log tail the
// kubelet fell back to): the caller then has a message for people only. A
// reason outside the closed set reads as ReasonFailed.
func Decode(msg string) (Result, bool) {
	msg = strings.TrimSpace(msg)
	if !strings.HasPrefix(msg, "{") {
		return Result{}, false
	}
	var r Result
	// Unknown fields are allowed: a newer deployer may say more.
	dec := json.NewDecoder(strings.NewReader(msg))
	if err := dec.Decode(&r); err != nil || dec.More() {
		return Result{}, false
	}
	switch r.Outcome {
	case OutcomeSucceeded, OutcomeFailed, OutcomeDrifted:
	default:
		return Result{}, false
	}
	if r.Reason != "" && !reasons[r.Reason] {
		r.Reason = ReasonFailed
	}
	if r.Outcome == OutcomeFailed && r.Reason == "" {
		r.Reason = ReasonFailed
	}
	return r, true
}

const ellipsis = "..."

// Truncate cuts s to at most n bytes on a rune boundary, ending in "..."
// when it cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut < 0 {
		cut = 0
	}
	return s[:cut] + ellipsis
}
