package deployer

import (
	"context"
	"errors"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/internal/printable"
	"github.com/petri-dev/petri/internal/redact"
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

// MaxMessageBytes bounds the message of a result. The whole result is bounded
// by contract.MaxBytes, what Kubernetes keeps of a termination message; the
// operator puts the message into a condition, where a short line is what a
// user reads.
const MaxMessageBytes = 1024

var sentinelReasons = []struct {
	err    error
	reason contract.Reason
}{
	{ErrInvalidArguments, contract.ReasonInvalidArguments},
	{ErrDigestMismatch, contract.ReasonDigestMismatch},
	{ErrChartNotFound, contract.ReasonChartNotFound},
	{ErrVersionNotFound, contract.ReasonVersionNotFound},
	{ErrValuesInvalid, contract.ReasonValuesInvalid},
	{ErrKubeVersionIncompatible, contract.ReasonKubeVersionIncompatible},
	{ErrRequiredValueMissing, contract.ReasonRequiredValueMissing},
	{ErrRenderFailed, contract.ReasonRenderFailed},
}

// Helm flattens some errors into strings (a failed update of several objects
// is one joined message), so API refusals are also recognised by the texts
// the API server writes for them.
var refusedText = regexp.MustCompile(`is forbidden: |\bUnauthorized\b|admission webhook .* denied the request|is invalid: `)

// Classify maps an error to the reason of its result (contract.Reason), the
// closed set the operator acts on; its Final decides the exit code that feeds
// the Job's PodFailurePolicy.
func Classify(err error) contract.Reason {
	if err == nil {
		return ""
	}
	for _, s := range sentinelReasons {
		if errors.Is(err, s.err) {
			return s.reason
		}
	}
	// What the release's pods showed says more than that the wait ended.
	var pods *PodsError
	if errors.As(err, &pods) {
		return pods.Reason
	}
	if errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		strings.Contains(err.Error(), "context deadline exceeded") ||
		strings.Contains(err.Error(), "timed out waiting for the condition") {
		return contract.ReasonTimeout
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) || refusedText.MatchString(err.Error()) {
		return contract.ReasonKubernetesRefused
	}
	return contract.ReasonFailed
}

// TerminationMessage renders err as the one line for people in the result
// written to the termination log (FailureResult): "<Reason>: <detail>",
// whitespace collapsed, credentials redacted (redact.String), at most
// MaxMessageBytes long.
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

var whitespace = regexp.MustCompile(`\s+`)

// condense makes a multi-line error (Helm's schema errors are a list) fit one
// line and removes credentials from it (redact.String: URL userinfo,
// credential-like query values, Authorization echoes), since termination
// messages end up in object status, Events and pull requests that many can
// read.
func condense(s string) string {
	s = printable.String(redact.String(s))
	return strings.TrimSpace(whitespace.ReplaceAllString(s, " "))
}

func truncate(s string, n int) string { return contract.Truncate(s, n) }

// FailureResult is the result a failed run of action writes to its
// termination log: the reason, whether a new Job may succeed, and the
// message TerminationMessage renders.
func FailureResult(action string, err error) contract.Result {
	reason := Classify(err)
	return contract.Result{
		Action: action, Outcome: contract.OutcomeFailed,
		Reason: reason, Retryable: reason.Retryable(),
		Message: TerminationMessage(err),
	}
}
