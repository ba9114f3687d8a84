package jobs

import (
	"slices"
	"strings"
	"time"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/options"
	"github.com/petri-dev/petri/internal/printable"
)

// helmDefaultTimeout is Helm's bound on one operation when the release
// names none.
const helmDefaultTimeout = 5 * time.Minute

// deadlineMargin is what a deploy Job does beside the Helm operation
// itself: start, fetch the chart, take the release's lease.
const deadlineMargin = 5 * time.Minute

// ReleaseDeadline is how long a Job running a Helm operation on rel may
// take: its timeout (Helm's default when it names none) and the margin. A
// Job deadline below it would kill Helm midway through a wait, leaving a
// pending release, and report DeadlineExceeded instead of Helm's answer.
func ReleaseDeadline(rel petriv1.ReleaseOptions) time.Duration {
	t := helmDefaultTimeout
	if rel.Timeout != nil && rel.Timeout.Duration > 0 {
		t = rel.Timeout.Duration
	}
	return t + deadlineMargin
}

// OneLine keeps a message to one line of at most 1024 bytes, without the
// control and invisible characters a Job's output may carry (terminal
// escapes, bidirectional overrides): the message is the pull request's
// code's as much as Petri's, and it is shown in comments and terminals.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = printable.String(s)
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}

// ReleaseArgs are the deployer flags for chart access and Helm options.
func ReleaseArgs(o options.Options, chart petriv1.ChartReference, rel petriv1.ReleaseOptions) []string {
	var args []string
	if rel.Waits() {
		args = append(args, "--wait")
	}
	if rel.Timeout != nil {
		args = append(args, "--timeout", rel.Timeout.Duration.String())
	}
	if o.ChartCASecret != "" {
		args = append(args, "--ca-file", CAFile)
	}
	if host, ok := strings.CutPrefix(chart.Repository, "oci://"); ok {
		host, _, _ = strings.Cut(host, "/")
		if slices.Contains(o.PlainHTTPRegistries, host) {
			args = append(args, "--plain-http")
		}
	}
	return args
}
