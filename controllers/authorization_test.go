package controllers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// authorizationTimeout is the operator's --deployer-authorization-timeout in
// these tests.
const authorizationTimeout = 3 * time.Second

// aggregateToAdmin is the label by which the edit rules (Secrets among
// them) are aggregated into the admin ClusterRole.
const aggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"

// adminMayCreateSecrets reports whether the admin ClusterRole, as the
// aggregation controller last wrote it, grants creating Secrets.
func adminMayCreateSecrets(t *testing.T) bool {
	var admin rbacv1.ClusterRole
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: "admin"}, &admin))
	for _, r := range admin.Rules {
		if slices.Contains(r.Resources, "secrets") && (slices.Contains(r.Verbs, "create") || slices.Contains(r.Verbs, "*")) {
			return true
		}
	}
	return false
}

// editRoles carry the edit rules (Secrets among them) into the admin
// ClusterRole by their aggregate-to-admin label: edit itself and the role
// edit is aggregated from.
var editRoles = []string{"edit", "system:aggregate-to-edit"}

// labelEditRoles sets (value `"true"`) or removes (`null`) the
// aggregate-to-admin label of the edit roles.
func labelEditRoles(t *testing.T, value string) {
	patch := []byte(`{"metadata":{"labels":{"` + aggregateToAdmin + `":` + value + `}}}`)
	for _, name := range editRoles {
		role := &rbacv1.ClusterRole{}
		role.Name = name
		require.NoError(t, env.Client.Patch(context.Background(), role, client.RawPatch(types.MergePatchType, patch)))
	}
}

// withoutEditRulesInAdmin takes the edit rules out of the admin ClusterRole
// until the test ends, as a cluster whose admin role was changed would
// have it: a deployer bound to admin may then not create Secrets, and the
// authorizer never honours its binding. The test runs alone (no
// t.Parallel), so no other test's deployer needs admin meanwhile.
func withoutEditRulesInAdmin(t *testing.T) {
	labelEditRoles(t, "null")
	t.Cleanup(func() {
		labelEditRoles(t, `"true"`)
		require.Eventually(t, func() bool { return adminMayCreateSecrets(t) }, time.Minute, 50*time.Millisecond, "admin has its edit rules again")
	})
	require.Eventually(t, func() bool { return !adminMayCreateSecrets(t) }, time.Minute, 50*time.Millisecond, "admin loses its edit rules")
}

// TestUnhonouredBindingStallsAndBacksOff (hostile-input defect 10): a
// deployer RoleBinding the authorizer never honours is asked about less and
// less often, and the environment turns Stalled with DeployerNotAuthorized
// naming the binding, instead of five API calls every 200 ms forever with
// nothing in the status. Once admin has its rules back, it deploys.
func TestUnhonouredBindingStallsAndBacksOff(t *testing.T) {
	ctx := context.Background()
	withoutEditRulesInAdmin(t)
	_, mark := operatorWritesSince(0, "")
	e := newEnv("unauthorized", greeter("app"))
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })

	stalled := waitFor(t, e.Name, "Stalled, not authorized", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonDeployerNotAuthorized)
	})
	reviews, _ := operatorWritesSince(mark, "/subjectaccessreviews")
	c := findCondition(stalled, petriv1.ConditionStalled)
	t.Log(c.Message)
	assert.Contains(t, c.Message, "rolebinding "+stalled.Status.TargetNamespace+"/"+naming.DeployerRoleBinding)
	assert.Equal(t, petriv1.ReasonDeployerNotAuthorized, findCondition(stalled, petriv1.ConditionReady).Reason)
	for _, cs := range stalled.Status.Components {
		assert.Empty(t, cs.Job, "no Job starts while the deployer is not authorized")
	}
	// Asked at 0, 0.2, 0.4, 0.6, 0.9, 1.35 s and then every 0.75 s (a
	// quarter of the timeout) until the timeout: about nine reviews, where a
	// fixed 200 ms asks 15 or more in the same time.
	t.Logf("%d access reviews until Stalled", len(reviews))
	assert.LessOrEqual(t, len(reviews), 13, "reviews until Stalled: %s", strings.Join(reviews, ", "))

	// The edit rules come back: the operator finds out at its next
	// question and deploys.
	labelEditRoles(t, `"true"`)
	waitFor(t, e.Name, "Ready once authorized", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && findCondition(e, petriv1.ConditionStalled).Type == ""
	})
}
