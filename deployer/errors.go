package deployer

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Reason is the first word of the deployer's termination message. The
// operator reads it from the pod's status and copies it into the component's
// condition, so it must stay a closed, stable set: a user can act on
// VersionNotFound, not on a Go error string.
type Reason string

// The reasons a deploy or undeploy fails with. Each one points at who has to
// act: the config repository (chart, version, values), the cluster admin
// (RBAC, the cluster's version), the chart's workload (timeout) or the chart
// publisher (digest, templates). Final reports which of them no retry fixes.
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
	// ReasonTimeout: the release did not become ready within --timeout.
	ReasonTimeout Reason = "Timeout"
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

// Sentinel errors wrapped by the chart loaders and the Helm wrappers, so that
// Classify decides by errors.Is and not by parsing messages.
var (
	// ErrChartNotFound marks a chart that does not exist at its source.
	ErrChartNotFound = errors.New("chart not found")
	// ErrVersionNotFound marks a chart that exists without the wanted version.
	ErrVersionNotFound = errors.New("chart version not found")
	// ErrValuesInvalid marks values rejected before anything was applied.
	ErrValuesInvalid = errors.New("values invalid")
	// ErrDigestMismatch marks an archive whose sha256 differs from the index.
	ErrDigestMismatch = errors.New("chart digest mismatch")
	// ErrInvalidArguments marks a malformed command line.
	ErrInvalidArguments = errors.New("invalid arguments")
	// ErrKubeVersionIncompatible marks a chart whose kubeVersion constraint
	// the cluster does not meet.
	ErrKubeVersionIncompatible = errors.New("kubernetes version incompatible")
	// ErrRequiredValueMissing marks a render stopped by `required`.
	ErrRequiredValueMissing = errors.New("required value missing")
	// ErrRenderFailed marks any other failure to render the templates.
	ErrRenderFailed = errors.New("render failed")
)

// MaxMessageBytes bounds the termination message. Kubernetes keeps at most
// 4096 bytes per container and the operator puts the message into a
// condition, where a short line is what a user reads.
const MaxMessageBytes = 1024

var sentinelReasons = []struct {
	err    error
	reason Reason
}{
	{ErrInvalidArguments, ReasonInvalidArguments},
	{ErrDigestMismatch, ReasonDigestMismatch},
	{ErrChartNotFound, ReasonChartNotFound},
	{ErrVersionNotFound, ReasonVersionNotFound},
	{ErrValuesInvalid, ReasonValuesInvalid},
	{ErrKubeVersionIncompatible, ReasonKubeVersionIncompatible},
	{ErrRequiredValueMissing, ReasonRequiredValueMissing},
	{ErrRenderFailed, ReasonRenderFailed},
}

// Final reports whether a failure with this reason is certain to repeat
// when the same Job runs again: its cause is the chart, the values, the
// cluster's version or the Job's own arguments, which a retry does not change.
// A final failure ends its Job at once instead of costing backoffLimit more
// pods; a new generation of the environment (other values, another chart
// version) is what fixes it. Everything else (API refusals, timeouts,
// unreachable repositories, charts not yet published) may pass on a retry.
func (r Reason) Final() bool {
	switch r {
	case ReasonInvalidArguments, ReasonValuesInvalid, ReasonKubeVersionIncompatible,
		ReasonRequiredValueMissing, ReasonRenderFailed:
		return true
	}
	return false
}

// Helm flattens some errors into strings (a failed update of several objects
// is one joined message), so API refusals are also recognised by the texts
// the API server writes for them.
var refusedText = regexp.MustCompile(`is forbidden: |\bUnauthorized\b|admission webhook .* denied the request|is invalid: `)

// Classify maps an error to the Reason the operator acts on.
func Classify(err error) Reason {
	if err == nil {
		return ""
	}
	for _, s := range sentinelReasons {
		if errors.Is(err, s.err) {
			return s.reason
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		strings.Contains(err.Error(), "context deadline exceeded") ||
		strings.Contains(err.Error(), "timed out waiting for the condition") {
		return ReasonTimeout
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) || refusedText.MatchString(err.Error()) {
		return ReasonKubernetesRefused
	}
	return ReasonFailed
}

// TerminationMessage renders err as the one line written to the termination
// log: "<Reason>: <detail>", whitespace collapsed, credentials in URLs
// redacted, at most MaxMessageBytes long.
func TerminationMessage(err error) string {
	reason := Classify(err)
	detail := condense(err.Error())
	// The reason already says what the sentinel's text would.
	for _, s := range sentinelReasons {
		if s.reason == reason {
			detail = strings.Replace(detail, s.err.Error()+": ", "", 1)
		}
	}
	return truncate(string(reason)+": "+detail, MaxMessageBytes)
}

var (
	urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@`)
	whitespace  = regexp.MustCompile(`\s+`)
)

// condense makes a multi-line error (Helm's schema errors are a list) fit one
// line and strips user:password@ from any URL in it, since termination
// messages end up in object status that many can read.
func condense(s string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}***@")
	return strings.TrimSpace(whitespace.ReplaceAllString(s, " "))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "..."
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
