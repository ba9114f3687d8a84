package controllers_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/local/controlplane"
)

func chartsDir() string {
	root, _ := controlplane.RepoRoot()
	return filepath.Join(root, "examples", "charts")
}

type access struct {
	verb, group, resource, namespace string
	allowed                          bool
}

func checkAccess(t *testing.T, user string, cases []access) {
	t.Helper()
	for _, c := range cases {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.namespace,
			},
		}}
		res, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, c.allowed, res.Status.Allowed, "%s %s %s.%s in %q", user, c.verb, c.resource, c.group, c.namespace)
	}
}

// The real API server's authorizer, with the RBAC manifests of config/rbac,
// decides: the operator cannot write workload objects; the deployer can, in
// its own namespace only.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("rbac-a", greeter("app"))))
	require.NoError(t, env.Client.Create(ctx, newEnv("rbac-b", greeter("app"))))
	a := waitFor(t, "rbac-a", "bound", bound).Status.TargetNamespace
	b := waitFor(t, "rbac-b", "bound", bound).Status.TargetNamespace

	checkAccess(t, "system:serviceaccount:"+mgmtNS+":petri-operator", []access{
		{"create", "apps", "deployments", a, false},
		{"create", "", "secrets", a, false},
		{"create", "", "configmaps", a, false},
		{"create", "", "pods", a, false},
		{"get", "", "secrets", a, false},
		{"create", "", "namespaces", "", true},
		{"delete", "", "namespaces", "", true},
		{"create", "rbac.authorization.k8s.io", "rolebindings", a, true},
		{"create", "batch", "jobs", mgmtNS, true},
		{"create", "", "secrets", mgmtNS, true},
		{"create", "batch", "jobs", a, false},
		{"create", "", "secrets", "default", false},
		{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", false},
	})
	deployer := "system:serviceaccount:" + mgmtNS + ":" + naming.DeployerServiceAccount("rbac-a")
	checkAccess(t, deployer, []access{
		{"create", "apps", "deployments", a, true},
		{"create", "", "secrets", a, true},
		{"create", "", "configmaps", a, true},
		{"create", "apps", "deployments", b, false},
		{"get", "", "secrets", b, false},
		{"create", "apps", "deployments", mgmtNS, false},
		{"get", "", "secrets", mgmtNS, false},
		{"create", "batch", "jobs", mgmtNS, false},
		{"create", "", "namespaces", "", false},
	})
}
