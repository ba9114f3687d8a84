package render_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

// userOutput is what a shared workload's provision or deprovision image
// wrote as its termination message (or the tail of its logs): anything at
// all, here a password.
const userOutput = "psql: FATAL: password authentication failed; DB_PASSWORD=hunter2"

const (
	provisionJob   = "shop-pr-1-abcdef-postgres-provision-g1-0a1b2c3d"
	deprovisionJob = "shop-pr-1-abcdef-postgres-deprovision-g1-a1-4e5f6a7b"
	deployJob      = "shop-pr-1-abcdef-web-deploy-g1-8c9d0e1f"
)

func condition(e *petriv1.EphemeralEnvironment, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: e.Generation})
}

// failedProvision is an environment as the operator reports a failed
// provision Job: the binding's lastError is the container's termination
// message, and the conditions and the blocked component's message quote
// it.
func failedProvision(componentFailed bool) *petriv1.EphemeralEnvironment {
	api := petriv1.ComponentStatus{Name: "api", Phase: petriv1.ComponentPending, Generation: 1, Message: "blocked: shared workload postgres failed to bind: " + userOutput}
	comps := []petriv1.ComponentStatus{api}
	deployed := "failed: api (" + api.Message + ")"
	if componentFailed {
		comps = append(comps, petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: 1, Job: deployJob, LastError: "ChartNotFound: web 2.0.1 is not in https://charts.example.com"})
		deployed += "; web (ChartNotFound: web 2.0.1 is not in https://charts.example.com)"
	}
	e := env(1, 1, petriv1.EnvironmentFailed, "", comps...)
	e.Namespace = "petri-system"
	e.Spec.SharedWorkloads = []string{"postgres"}
	e.Status.SharedWorkloads = []petriv1.BindingStatus{{Name: "postgres", Phase: petriv1.ComponentFailed, Job: provisionJob, Attempt: 1, Message: "provisioning", LastError: userOutput}}
	condition(e, petriv1.ConditionSharedWorkloadsBound, metav1.ConditionFalse, petriv1.ReasonBindFailed, "failed: postgres ("+userOutput+")")
	condition(e, petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployFailed, deployed)
	for _, typ := range []string{petriv1.ConditionStalled, petriv1.ConditionReady} {
		status := metav1.ConditionTrue
		if typ == petriv1.ConditionReady {
			status = metav1.ConditionFalse
		}
		condition(e, typ, status, petriv1.ReasonBindFailed, "failed: postgres ("+userOutput+")")
	}
	return e
}

// failedDeprovision is an environment being deleted whose deprovision Job
// failed and is retried.
func failedDeprovision() *petriv1.EphemeralEnvironment {
	e := env(1, 1, petriv1.EnvironmentDeleting, "")
	e.Namespace = "petri-system"
	e.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e.Status.SharedWorkloads = []petriv1.BindingStatus{{Name: "postgres", Phase: petriv1.ComponentUndeploying, Job: deprovisionJob, Attempt: 1, Message: "deprovisioning", LastError: userOutput}}
	condition(e, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonTeardownFailed, "deprovision failed, retrying: postgres: deprovision failed (attempt 1): "+userOutput+"; retrying in 10s")
	return e
}

// What a shared workload's own containers wrote never goes into a commit
// status or the comment; the comment says which Job failed and how to read
// its logs. The deployer's own reasons (a component's lastError) are shown.
func TestUserContainerOutputStaysInTheCluster(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  *petriv1.EphemeralEnvironment
		// shown must appear in the comment.
		shown []string
		// status is in the commit status description, when one is posted.
		status string
	}{
		{"provision failed", failedProvision(false), []string{
			"kubectl -n petri-system logs job/" + provisionJob,
			"| postgres | Failed |",
		}, "Deploy failed: failed: postgres (container output withheld; see the logs of job " + provisionJob + ")"},
		{"provision and a deploy failed", failedProvision(true), []string{
			"kubectl -n petri-system logs job/" + provisionJob,
			"kubectl -n petri-system logs job/" + deployJob,
			"| web | web 2.0.1 | Failed | `ChartNotFound: web 2.0.1 is not in https://charts.example.com` (Job `" + deployJob + "`; its log: `kubectl -n petri-system logs job/" + deployJob + "`) |",
		}, "Deploy failed: failed: postgres (container output withheld; see the logs of job " + provisionJob + ")"},
		{"deprovision failed", failedDeprovision(), []string{
			"kubectl -n petri-system logs job/" + deprovisionJob,
			"| postgres | Undeploying |",
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := render.PRState{Application: "shop", HeadSHA: "0123456789", Env: tt.env}
			body := render.Comment([]render.PRState{st}, render.State{})
			assert.NotContains(t, body, "hunter2")
			assert.NotContains(t, body, "password authentication")
			for _, s := range tt.shown {
				assert.Contains(t, body, s)
			}
			cs, ok := render.CommitStatus(st)
			assert.Equal(t, tt.status != "", ok)
			if ok {
				assert.NotContains(t, cs.Description, "hunter2")
				assert.Equal(t, "failure", cs.State)
				assert.Equal(t, tt.status, cs.Description)
			}
			phase, detail := render.EnvState(tt.env)
			assert.NotContains(t, detail, "hunter2", "the read API's detail (%s)", phase)
			assert.False(t, strings.Contains(body, userOutput))
		})
	}
}
