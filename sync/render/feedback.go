package render

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/internal/printable"
	"github.com/petri-dev/petri/internal/redact"
	"github.com/petri-dev/petri/sync/provider"
)

// CommentMarker identifies sync's comment on a pull request.
const CommentMarker = "<!-- petri-sync -->"

// PRState is what sync knows about one application's environment for one
// pull request, the input of the feedback.
type PRState struct {
	Application string
	Repository  string
	Number      int
	// HeadSHA is the pull request's head commit, where the status goes.
	HeadSHA string
	// Env is the environment as last seen; nil when there is none.
	Env *petriv1.EphemeralEnvironment
	// Waiting says why the head commit is not deployed yet (artifact gate,
	// cap on environments).
	Waiting string
	// Error is a problem writing the environment (configuration, chart
	// resolution).
	Error string
	// URL is the environment's address.
	URL string
	// Deleted says why the environment was removed.
	Deleted string

	// The lifecycle, filled from the application and the state in the
	// comment's marker. Labels are the pull request's labels (the keep
	// label among them). TTL is the application's ttl (zero: none) and
	// ExpiresAt when the environment expires (zero: no ttl, or its clock has
	// not started); ExpiryWarning is set when little is left. KeptBy says
	// what suspends expiry, KeepLabel is the label that would. ExpiredSHA
	// and ExpiredAt say the environment expired (Env is nil then).
	// SleepAfter is the application's idle time before sleep.
	TTL           time.Duration
	Labels        []string
	ExpiresAt     time.Time
	ExpiryWarning bool
	KeptBy        string
	KeepLabel     string
	ExpiredSHA    string
	ExpiredAt     time.Time
	SleepAfter    time.Duration
}

// Expired reports whether the environment expired and stays gone.
func (s PRState) Expired() bool { return s.ExpiredSHA != "" && s.Env == nil }

// StatusContext is the commit status context of an application.
func StatusContext(app string) string { return "petri/" + app }

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// What leaves the cluster. Feedback is posted where everyone who can read
// the pull request reads it, so it carries only text Petri wrote:
//
//   - status.components[].lastError is the one-line reason the deployer
//     (Petri's own image) wrote as its termination message, such as
//     "ChartNotFound: ...": it is shown.
//   - status.sharedWorkloads[].lastError is the termination message of a
//     binding's bind, provision or deprovision Job. Provision and
//     deprovision run the shared workload's own image, so it is whatever
//     that image printed (with the tail of its logs when it wrote no
//     message), credentials included. It is never shown: wherever the
//     operator quotes it (the Stalled and Ready conditions, a blocked
//     component's message) the quote is replaced by the Job whose logs
//     hold it, and the comment says how to read them.

// withheld stands in for a binding's lastError.
func withheld(bs petriv1.BindingStatus) string {
	if bs.Job == "" {
		return "container output withheld"
	}
	return "container output withheld; see the logs of job " + bs.Job
}

// scrub replaces every shared-workload lastError quoted in s, in one pass,
// longest first.
func scrub(ee *petriv1.EphemeralEnvironment, s string) string {
	bindings := slices.Clone(ee.Status.SharedWorkloads)
	slices.SortFunc(bindings, func(a, b petriv1.BindingStatus) int { return len(b.LastError) - len(a.LastError) })
	var pairs []string
	for _, bs := range bindings {
		if strings.TrimSpace(bs.LastError) != "" {
			pairs = append(pairs, bs.LastError, withheld(bs))
		}
	}
	if len(pairs) == 0 {
		return s
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// Scrub replaces every shared-workload lastError quoted in s by the name of
// the Job whose logs hold it: what a binding's own containers printed may
// carry credentials, and no page or comment of sync's shows it.
func Scrub(ee *petriv1.EphemeralEnvironment, s string) string { return scrub(ee, s) }

// degradedPrefix begins the detail of an environment that was deployed and
// whose workloads stopped running (phase Degraded): Failed too, since it
// serves nothing, but not a deploy that failed.
const degradedPrefix = "stopped running: "

// EnvState summarises an environment for its current generation: Ready,
// Failed (with a reason; a Degraded environment is Failed, its detail
// naming what stopped running) or Deploying (with progress). The detail carries
// no output of a shared workload's own containers.
func EnvState(ee *petriv1.EphemeralEnvironment) (phase string, detail string) {
	current := ee.Status.ObservedGeneration == ee.Generation
	ready := meta.FindStatusCondition(ee.Status.Conditions, petriv1.ConditionReady)
	stalled := meta.FindStatusCondition(ee.Status.Conditions, petriv1.ConditionStalled)
	switch {
	case ee.DeletionTimestamp != nil:
		return "Deleting", "the environment is being deleted"
	case string(ee.Status.Phase) == PhaseSleeping:
		if sl := ee.Status.Sleep; sl != nil && sl.Since != nil {
			return PhaseSleeping, "asleep since " + FormatTime(sl.Since.Time) + ": comment /petri wake or push a commit to wake it"
		}
		return PhaseSleeping, "asleep: comment /petri wake or push a commit to wake it"
	case stalled != nil && stalled.Status == metav1.ConditionTrue:
		return "Failed", scrub(ee, stalled.Message)
	case current && ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration >= ee.Generation:
		return "Ready", "environment ready" + notWaitedFor(ee)
	case current && ee.Status.Phase == petriv1.EnvironmentDegraded:
		// Deployed, but a workload stopped running: the operator names
		// each object and why.
		why := "a workload is not running"
		if ready != nil && ready.Message != "" {
			why = scrub(ee, ready.Message)
		}
		return "Failed", degradedPrefix + why
	case current && (ee.Status.Phase == petriv1.EnvironmentFailed || ee.Status.Phase == petriv1.EnvironmentStalled):
		for _, c := range ee.Status.Components {
			if c.Phase == petriv1.ComponentFailed && c.LastError != "" {
				return "Failed", fmt.Sprintf("%s: %s", c.Name, scrub(ee, c.LastError))
			}
		}
		if ready != nil && ready.Message != "" {
			return "Failed", scrub(ee, ready.Message)
		}
		return "Failed", "deploy failed"
	}
	deployed := 0
	for _, c := range ee.Status.Components {
		if c.Phase == petriv1.ComponentDeployed && c.Generation == ee.Generation {
			deployed++
		}
	}
	return "Deploying", fmt.Sprintf("deploying: %d of %d components deployed", deployed, len(ee.Spec.Components))
}

// notWaitedFor names the components whose deploys did not wait for their
// workloads (release.wait false): Ready says nothing of their pods.
func notWaitedFor(ee *petriv1.EphemeralEnvironment) string {
	var names []string
	for _, c := range ee.Spec.Components {
		if !c.Release.Waits() {
			names = append(names, c.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "; not waited for (release.wait is false): " + strings.Join(names, ", ")
}

// CommitStatus is the status to post on the head commit; false when there
// is nothing to say (no environment and nothing pending).
func CommitStatus(s PRState) (provider.CommitStatus, bool) {
	st := provider.CommitStatus{Context: StatusContext(s.Application), TargetURL: s.URL}
	switch {
	case s.Error != "":
		st.State, st.Description, st.TargetURL = "error", s.Error, ""
	case s.Expired():
		// Not a failure of the commit: a required check stays green.
		st.State, st.TargetURL = "success", ""
		st.Description = fmt.Sprintf("Environment expired (ttl %s); push or comment /petri wake to bring it back", FormatDuration(s.TTL))
	case s.Waiting != "":
		st.State, st.Description, st.TargetURL = "pending", s.Waiting, ""
	case s.Env == nil || s.Env.Spec.Source == nil || s.Env.DeletionTimestamp != nil:
		return st, false
	case s.Env.Spec.Source.SHA != s.HeadSHA:
		st.State, st.Description, st.TargetURL = "pending", "waiting to deploy "+short(s.HeadSHA), ""
	default:
		phase, detail := EnvState(s.Env)
		switch phase {
		case "Ready":
			st.State = "success"
			st.Description = "Environment ready"
			if s.URL != "" {
				st.Description = "Environment ready at " + s.URL
			}
		case "Failed":
			st.State, st.Description = "failure", "Deploy failed: "+detail
			if strings.HasPrefix(detail, degradedPrefix) {
				st.Description = "Environment " + detail
			}
		case PhaseSleeping:
			st.State, st.Description = "success", "Environment asleep; comment /petri wake or push a commit to wake it"
		default:
			st.State, st.Description = "pending", strings.ToUpper(detail[:1])+detail[1:]
		}
	}
	// Errors and reasons may quote a URL or a remote's answer.
	st.Description = redact.String(st.Description)
	return st, true
}

// Settled tells whether an application's state on a pull request is one
// a person is told of at once: a result (Ready, Failed, asleep, expired,
// torn down), a problem (a configuration error, a fault the status names
// while the operator retries), a wait a person may act on (an artifact
// gate, the cap on environments). The states on the way to one (deploying
// with nothing failed, the head commit not written yet, tearing down) are
// not: sync may hold their writes back a while (the comment's patience),
// and the settled state that follows makes most of them moot.
func Settled(s PRState) bool {
	switch {
	case s.Error != "" || s.Expired() || s.Waiting != "":
		return true
	case s.Env == nil:
		return true
	case s.Env.DeletionTimestamp != nil:
		return false
	case s.Env.Spec.Source == nil || s.Env.Spec.Source.SHA != s.HeadSHA:
		return false
	}
	switch phase, _ := EnvState(s.Env); phase {
	case "Ready", "Failed", PhaseSleeping:
		return true
	}
	// Deploying: settled once a fault is named, a retry under way or not.
	for _, c := range s.Env.Status.Components {
		if c.LastError != "" {
			return true
		}
	}
	for _, bs := range s.Env.Status.SharedWorkloads {
		if bs.LastError != "" {
			return true
		}
	}
	return false
}

// cell fits a text into a table cell or a line of the comment, without
// credentials: errors and reasons may quote a URL or a remote's answer.
func cell(s string) string {
	s = printable.String(redact.String(s))
	return strings.ReplaceAll(s, "|", `\|`)
}

// quoted fits a text the pull request's code may have written (a
// container's last log line, a chart's error, a probe's message) into the
// comment as a code span, where GitHub, GitLab and Gitea render no link,
// mention, image or HTML: posted under Petri's name, "[Approve](https://…)
// @org/security" must not read as Petri's. Its backticks become ' so the
// span cannot be closed early; empty text stays empty.
func quoted(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(cell(s), "`", "'"))
	if s == "" {
		return ""
	}
	return "`" + s + "`"
}

// Comment renders the one comment sync keeps on a pull request, with a
// section per application, the replies to the latest commands and, hidden,
// the state.
func Comment(states []PRState, state State) string {
	sort.Slice(states, func(i, j int) bool { return states[i].Application < states[j].Application })
	var b strings.Builder
	b.WriteString(CommentMarker + "\n### Preview environments\n")
	for _, s := range states {
		fmt.Fprintf(&b, "\n#### %s\n", s.Application)
		switch {
		case s.Expired():
			fmt.Fprintf(&b, ":hourglass_flowing_sand: **Expired** at %s: the environment of commit `%s` was deleted %s after it was deployed.\n",
				FormatTime(s.ExpiredAt), short(s.ExpiredSHA), FormatDuration(s.TTL))
			fmt.Fprintf(&b, "To bring it back, push a commit or comment `/petri wake`; `/petri keep` or the label `%s` then keeps it.\n", s.KeepLabel)
			continue
		case s.Deleted != "" && s.Env == nil:
			fmt.Fprintf(&b, "Environment deleted: %s.\n", s.Deleted)
			continue
		case s.Error != "":
			fmt.Fprintf(&b, ":x: %s\n", cell(s.Error))
		case s.Waiting != "":
			fmt.Fprintf(&b, ":hourglass: %s\n", cell(s.Waiting))
		}
		if s.Env == nil {
			continue
		}
		phase, detail := EnvState(s.Env)
		icon := map[string]string{"Ready": ":white_check_mark:", "Failed": ":x:", "Deleting": ":wastebasket:", PhaseSleeping: ":zzz:"}[phase]
		if icon == "" {
			icon = ":rocket:"
		}
		if phase == "Failed" {
			// A failure's detail quotes what failed, in the words of the
			// component's own output.
			detail = quoted(detail)
		} else {
			detail = cell(detail)
		}
		fmt.Fprintf(&b, "%s **%s**: %s\n\n", icon, phase, detail)
		if s.ExpiryWarning && s.KeptBy == "" && !s.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, ":warning: **This environment expires at %s.** To keep it, comment `/petri extend 24h` or `/petri keep`, or add the label `%s`.\n\n",
				FormatTime(s.ExpiresAt), s.KeepLabel)
		}
		whereLines(&b, s)
		lifecycleLines(&b, s)
		b.WriteString("\n| Component | Chart | Phase | Last error |\n|---|---|---|---|\n")
		status := map[string]petriv1.ComponentStatus{}
		for _, c := range s.Env.Status.Components {
			status[c.Name] = c
		}
		var logs []string
		for _, c := range s.Env.Spec.Components {
			cs := status[c.Name]
			p := string(cs.Phase)
			if p == "" {
				p = string(petriv1.ComponentPending)
			}
			if cs.NextRetryAt != nil {
				p = fmt.Sprintf("%s (attempt %d; next attempt at %s)", p, cs.Attempt, FormatTime(cs.NextRetryAt.Time))
			} else if cs.Attempt > 1 {
				p = fmt.Sprintf("%s (attempt %d)", p, cs.Attempt)
			}
			last := quoted(scrub(s.Env, cs.LastError))
			if cs.LastError != "" && cs.Job != "" {
				// The row names the Job, its reason and how to read its log.
				last = fmt.Sprintf("%s (Job `%s`; its log: %s)", last, cs.Job, logsCommand(s.Env, cs.Job))
			}
			fmt.Fprintf(&b, "| %s | %s %s | %s | %s |\n", c.Name, c.Chart.Name, c.Chart.Version, p, last)
		}
		if len(s.Env.Status.SharedWorkloads) > 0 {
			b.WriteString("\n| Shared workload | Phase | Job |\n|---|---|---|\n")
			for _, bs := range s.Env.Status.SharedWorkloads {
				fmt.Fprintf(&b, "| %s | %s | %s |\n", bs.Name, bs.Phase, bs.Job)
				if bs.LastError != "" && bs.Job != "" {
					logs = append(logs, fmt.Sprintf("- shared workload `%s`: %s", bs.Name, logsCommand(s.Env, bs.Job)))
				}
			}
		}
		if len(logs) > 0 {
			b.WriteString("\nWhat failed is in the logs of its Job, in the cluster (a shared workload's own container output is never posted here):\n")
			b.WriteString(strings.Join(logs, "\n") + "\n")
		}
	}
	if len(state.Notes) > 0 {
		b.WriteString("\n#### Commands\n")
		for _, n := range state.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	fmt.Fprintf(&b, "\n<sub>Commands for people with write access: %s.</sub>\n", CommandHelp)
	b.WriteString(state.Marker() + "\n")
	return b.String()
}

// whereLines says where the environment is: its URL, namespace, cluster,
// name and commit.
func whereLines(b *strings.Builder, s PRState) {
	if s.URL != "" {
		fmt.Fprintf(b, "- URL: %s\n", s.URL)
	}
	ns := s.Env.Status.TargetNamespace
	if ns == "" {
		ns = "(not assigned yet)"
	} else {
		ns = "`" + ns + "`"
	}
	fmt.Fprintf(b, "- Namespace: %s\n", ns)
	cluster := Cluster(s.Env)
	if s.Env.Status.Cluster != "" {
		cluster = "`" + cluster + "`"
	}
	fmt.Fprintf(b, "- Cluster: %s\n", cluster)
	fmt.Fprintf(b, "- Environment: `%s`", s.Env.Name)
	if s.Env.Spec.Source != nil {
		fmt.Fprintf(b, " at commit `%s`", short(s.Env.Spec.Source.SHA))
	}
	b.WriteString("\n")
}

// lifecycleLines says when the environment expires or sleeps, and what
// keeps it.
func lifecycleLines(b *strings.Builder, s PRState) {
	switch {
	case s.TTL <= 0:
	case s.KeptBy != "":
		fmt.Fprintf(b, "- Expiry: suspended by %s\n", s.KeptBy)
	case !s.ExpiresAt.IsZero():
		fmt.Fprintf(b, "- Expires: %s (ttl %s from the first deploy of its commit); `/petri extend <duration>`, `/petri keep` or the label `%s` keeps it longer\n",
			FormatTime(s.ExpiresAt), FormatDuration(s.TTL), s.KeepLabel)
	default:
		fmt.Fprintf(b, "- Expires: %s after its commit is first ready\n", FormatDuration(s.TTL))
	}
	if s.SleepAfter > 0 {
		fmt.Fprintf(b, "- Sleeps after %s without a push or a command; a push or `/petri wake` wakes it\n", FormatDuration(s.SleepAfter))
	}
}

// logsCommand is how someone with access to the cluster reads a Job's logs;
// the Jobs run in the environment's (the management) namespace.
func logsCommand(ee *petriv1.EphemeralEnvironment, job string) string {
	if ee.Namespace == "" {
		return fmt.Sprintf("`kubectl logs job/%s`", job)
	}
	return fmt.Sprintf("`kubectl -n %s logs job/%s`", ee.Namespace, job)
}
