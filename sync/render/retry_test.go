package render_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/sync/render"
)

// A component whose deploy failed for a reason that can pass shows its
// attempt and when the next one starts; a later attempt shows its number.
func TestCommentShowsRetries(t *testing.T) {
	next := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC))
	e := env(1, 0, petriv1.EnvironmentDeploying, metav1.ConditionFalse,
		petriv1.ComponentStatus{Name: "api", Phase: petriv1.ComponentDeploying, Generation: 1, Attempt: 2, Job: "shop-pr-1-abcdef-api-deploy-g1-a2-12345678"},
		petriv1.ComponentStatus{Name: "web", Phase: petriv1.ComponentFailed, Generation: 1, Attempt: 1, NextRetryAt: &next, Job: "shop-pr-1-abcdef-web-deploy-g1-12345678", LastError: "KubernetesRefused: services is forbidden: exceeded quota"},
	)
	body := render.Comment([]render.PRState{{Application: "shop", Repository: "acme/shop", Number: 1, HeadSHA: "0123456789", Env: e}}, render.State{})
	assert.Contains(t, body, "| web | web 2.0.1 | Failed (attempt 1; next attempt at 2026-03-01 12:00:30 UTC) | `KubernetesRefused: services is forbidden: exceeded quota`")
	assert.Contains(t, body, "| api | api 1.4.2 | Deploying (attempt 2) |")
}
