package controllers_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
	checkAccessIn(t, env.Clientset, user, cases)
}

// checkAccessIn asks the authorizer of the cluster cs talks to.
func checkAccessIn(t *testing.T, cs kubernetes.Interface, user string, cases []access) {
	t.Helper()
	for _, c := range cases {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.namespace,
			},
		}}
		res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, c.allowed, res.Status.Allowed, "%s %s %s.%s in %q", user, c.verb, c.resource, c.group, c.namespace)
	}
}

// In a workload cluster, with what the chart's workload mode installs there
// (config/rbac), Petri's identity may read the releases' Deployments,
// StatefulSets, DaemonSets and Jobs in every namespace, for the health
// watch, and write none of them outside petri-system.
func TestWorkloadClusterIdentityReadsTheReleasesWorkloadsOnly(t *testing.T) {
	t.Parallel()
	wl := workloadCluster(t)
	const ns = "web-pr-1-ab12"
	var cases []access
	for _, r := range []struct{ group, resource string }{{"apps", "deployments"}, {"apps", "statefulsets"}, {"apps", "daemonsets"}, {"batch", "jobs"}} {
		for _, verb := range []string{"get", "list", "watch"} {
			cases = append(cases, access{verb, r.group, r.resource, "", true})
		}
		for _, verb := range []string{"create", "update", "patch", "delete"} {
			cases = append(cases, access{verb, r.group, r.resource, ns, false})
		}
	}
	checkAccessIn(t, wl.Clientset, "system:serviceaccount:"+mgmtNS+":petri-operator", append(cases,
		access{"list", "", "pods", ns, false},
		access{"get", "", "secrets", ns, false},
		access{"list", "apps", "replicasets", ns, false},
	))
}

// The real API server's authorizer, with the RBAC manifests of config/rbac,
// decides: the operator cannot write workload objects; the deployer can, in
// its own namespace only.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "rbac-a", succeedAll)
	standIn(t, "rbac-b", succeedAll)
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
		// Its Pod Security level only: the fences refuse any other change
		// (tests/security).
		{"patch", "", "namespaces", "", true},
		{"create", "rbac.authorization.k8s.io", "rolebindings", a, true},
		{"create", "batch", "jobs", mgmtNS, true},
		{"create", "", "secrets", mgmtNS, true},
		{"create", "batch", "jobs", a, false},
		{"create", "", "secrets", "default", false},
		{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", false},
		// The health watch reads the releases' workloads, and writes none.
		{"list", "apps", "deployments", "", true},
		{"watch", "apps", "statefulsets", "", true},
		{"watch", "apps", "daemonsets", "", true},
		{"patch", "apps", "deployments", a, false},
		{"update", "apps", "statefulsets", a, false},
		{"delete", "apps", "daemonsets", a, false},
		{"list", "", "pods", a, false},
		// And the releases' Jobs.
		{"watch", "batch", "jobs", "", true},
		{"delete", "batch", "jobs", a, false},
		{"update", "batch", "jobs", a, false},
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
		// What a deploy's wait reads of the release's pods, in its own
		// namespace only; its namespace's labels (the Pod Security level)
		// are the installation's, not its to change.
		{"list", "", "pods", a, true},
		{"list", "", "events", a, true},
		{"list", "apps", "replicasets", a, true},
		{"list", "", "pods", b, false},
		{"list", "", "events", mgmtNS, false},
		{"patch", "", "namespaces", "", false},
		{"update", "", "namespaces", "", false},
	})
	// A crashed container's last log line (pods/log), in the deployer's
	// namespace only; the operator reads no workload's log.
	for _, c := range []struct {
		user, namespace string
		allowed         bool
	}{
		{deployer, a, true},
		{deployer, b, false},
		{deployer, mgmtNS, false},
		{deployer, sharedNS, false},
		{"system:serviceaccount:" + mgmtNS + ":petri-operator", a, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: c.user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Subresource: "log", Namespace: c.namespace},
		}}
		res, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, c.allowed, res.Status.Allowed, "%s get pods/log in %q", c.user, c.namespace)
	}
}
