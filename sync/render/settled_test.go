package render_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

func TestSettled(t *testing.T) {
	head := "0123456789"
	deleting := env(1, 1, petriv1.EnvironmentReady, metav1.ConditionTrue)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	retrying := env(1, 0, petriv1.EnvironmentDeploying, metav1.ConditionFalse,
		petriv1.ComponentStatus{Name: "api", Phase: petriv1.ComponentDeploying, Generation: 1, Attempt: 2, LastError: "Unschedulable: 0/1 nodes match node affinity/selector"})
	binding := env(1, 0, petriv1.EnvironmentDeploying, "")
	binding.Status.SharedWorkloads = []petriv1.BindingStatus{{Name: "db", LastError: "provision failed", Job: "db-provision"}}
	tests := []struct {
		name  string
		state render.PRState
		want  bool
	}{
		{"nothing to say", render.PRState{HeadSHA: head}, true},
		{"torn down", render.PRState{HeadSHA: head, Deleted: "pull request closed"}, true},
		{"expired", render.PRState{HeadSHA: head, ExpiredSHA: head}, true},
		{"waiting for a gate", render.PRState{HeadSHA: head, Waiting: "waiting for check run build on 0123456"}, true},
		{"configuration error", render.PRState{HeadSHA: head, Error: "chart resolution failed"}, true},
		{"ready", render.PRState{HeadSHA: head, Env: env(2, 2, petriv1.EnvironmentReady, metav1.ConditionTrue)}, true},
		{"failed", render.PRState{HeadSHA: head, Env: env(2, 2, petriv1.EnvironmentFailed, metav1.ConditionFalse, petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, LastError: "boom"})}, true},
		{"a retry under way names its fault", render.PRState{HeadSHA: head, Env: retrying}, true},
		{"a binding's fault", render.PRState{HeadSHA: head, Env: binding}, true},
		{"deploying", render.PRState{HeadSHA: head, Env: env(2, 1, petriv1.EnvironmentReady, metav1.ConditionTrue)}, false},
		{"head commit not written yet", render.PRState{HeadSHA: "fedcba9876", Env: env(2, 2, petriv1.EnvironmentReady, metav1.ConditionTrue)}, false},
		{"tearing down", render.PRState{HeadSHA: head, Env: deleting}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, render.Settled(tt.state))
		})
	}
}
