package render

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
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
}

// StatusContext is the commit status context of an application.
func StatusContext(app string) string { return "petri/" + app }

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// EnvState summarises an environment for its current generation: Ready,
// Failed (with a reason) or Deploying (with progress).
func EnvState(ee *petriv1.EphemeralEnvironment) (phase string, detail string) {
	current := ee.Status.ObservedGeneration == ee.Generation
	ready := meta.FindStatusCondition(ee.Status.Conditions, petriv1.ConditionReady)
	stalled := meta.FindStatusCondition(ee.Status.Conditions, petriv1.ConditionStalled)
	switch {
	case ee.DeletionTimestamp != nil:
		return "Deleting", "the environment is being deleted"
	case stalled != nil && stalled.Status == metav1.ConditionTrue:
		return "Failed", stalled.Message
	case current && ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration >= ee.Generation:
		return "Ready", "environment ready"
	case current && (ee.Status.Phase == petriv1.EnvironmentFailed || ee.Status.Phase == petriv1.EnvironmentStalled):
		for _, c := range ee.Status.Components {
			if c.Phase == petriv1.ComponentFailed && c.LastError != "" {
				return "Failed", fmt.Sprintf("%s: %s", c.Name, c.LastError)
			}
		}
		if ready != nil && ready.Message != "" {
			return "Failed", ready.Message
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

// CommitStatus is the status to post on the head commit; false when there
// is nothing to say (no environment and nothing pending).
func CommitStatus(s PRState) (provider.CommitStatus, bool) {
	st := provider.CommitStatus{Context: StatusContext(s.Application), TargetURL: s.URL}
	switch {
	case s.Error != "":
		st.State, st.Description, st.TargetURL = "error", s.Error, ""
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
		default:
			st.State, st.Description = "pending", strings.ToUpper(detail[:1])+detail[1:]
		}
	}
	return st, true
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// Comment renders the one comment sync keeps on a pull request, with a
// section per application.
func Comment(states []PRState) string {
	sort.Slice(states, func(i, j int) bool { return states[i].Application < states[j].Application })
	var b strings.Builder
	b.WriteString(CommentMarker + "\n### Preview environments\n")
	for _, s := range states {
		fmt.Fprintf(&b, "\n#### %s\n", s.Application)
		switch {
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
		icon := map[string]string{"Ready": ":white_check_mark:", "Failed": ":x:", "Deleting": ":wastebasket:"}[phase]
		if icon == "" {
			icon = ":rocket:"
		}
		fmt.Fprintf(&b, "%s **%s**: %s\n\n", icon, phase, cell(detail))
		if s.URL != "" {
			fmt.Fprintf(&b, "- URL: %s\n", s.URL)
		}
		ns := s.Env.Status.TargetNamespace
		if ns == "" {
			ns = "(not assigned yet)"
		} else {
			ns = "`" + ns + "`"
		}
		fmt.Fprintf(&b, "- Namespace: %s\n", ns)
		fmt.Fprintf(&b, "- Environment: `%s`", s.Env.Name)
		if s.Env.Spec.Source != nil {
			fmt.Fprintf(&b, " at commit `%s`", short(s.Env.Spec.Source.SHA))
		}
		b.WriteString("\n\n| Component | Chart | Phase | Last error |\n|---|---|---|---|\n")
		status := map[string]petriv1.ComponentStatus{}
		for _, c := range s.Env.Status.Components {
			status[c.Name] = c
		}
		for _, c := range s.Env.Spec.Components {
			cs := status[c.Name]
			p := string(cs.Phase)
			if p == "" {
				p = string(petriv1.ComponentPending)
			}
			fmt.Fprintf(&b, "| %s | %s %s | %s | %s |\n", c.Name, c.Chart.Name, c.Chart.Version, p, cell(cs.LastError))
		}
	}
	return b.String()
}
