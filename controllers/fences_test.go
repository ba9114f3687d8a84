package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/local/controlplane"
)

// The fences recompute the deployer identity from the environment a
// namespace names, in CEL, where the operator derives it in Go
// (naming.DeployerServiceAccount). In the workload cluster, fenced by
// config/fences, the operator's identity creates the namespace the operator
// makes for environments of every form of name, binds admin there to the
// environment's deployer, binds it again once the binding is deleted (as
// the operator restores it) and deletes the namespace; a namespace naming
// any other identity is refused, and so is binding any other there.
func TestFencesAdmitTheDeployerOfEveryEnvironmentName(t *testing.T) {
	wl := workloadCluster(t)
	ctx := context.Background()
	op, err := client.New(workload.operatorConfig, client.Options{Scheme: controlplane.Scheme()})
	require.NoError(t, err)
	level := testOptions().WorkloadPodSecurity
	// A policy takes effect a moment after it is stored, once the API
	// server has compiled it.
	require.Eventually(t, func() bool {
		unmarked := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fence-probe"}}
		err := op.Create(ctx, unmarked, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'petri-operator-namespaces'")
	}, time.Minute, 50*time.Millisecond, "the namespace fence is in effect in the workload cluster")
	require.Eventually(t, func() bool {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: naming.DeployerRoleBinding},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: mgmtNS, Name: "petri-operator"}},
		}
		err := op.Create(ctx, rb, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'petri-operator-rolebindings'")
	}, time.Minute, 50*time.Millisecond, "the RoleBinding fence is in effect in the workload cluster")
	for i, name := range []string{
		"web",
		// The longest name petri-deployer-<name> holds (63 characters),
		// and one more: cut, and a hash of the whole.
		strings.Repeat("a", 48),
		strings.Repeat("a", 49),
		// Cut where the readable part ends with dashes, which go.
		strings.Repeat("b", 38) + "--" + strings.Repeat("c", 20),
		// Not DNS labels: readable part and a hash of the name.
		"web.pr1",
		"x.y-z.w",
		strings.Repeat("d", 63) + "." + strings.Repeat("e", 63) + "." + strings.Repeat("f", 63) + "." + strings.Repeat("g", 61),
	} {
		t.Run(fmt.Sprintf("%d-%d", i, len(name)), func(t *testing.T) {
			uid := types.UID(fmt.Sprintf("fence-uid-%d", i))
			e := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name, UID: uid}}
			e.Status.TargetNamespace = naming.NamespaceCandidate(name, naming.UIDHash(uid), 8)
			e.Status.NamespaceNonce = "nonce"
			sa := naming.DeployerServiceAccount(name)

			// Another identity named on the namespace: another name, the
			// form without a hash, another's readable part with this hash,
			// the operator itself.
			other := []byte(sa)
			other[len("petri-deployer-")] = map[bool]byte{true: 'q', false: 'p'}[other[len("petri-deployer-")] == 'p']
			for _, forged := range []string{string(other), "petri-deployer-" + strings.ReplaceAll(name, ".", "-"), "petri-deployer-web-" + sa[len(sa)-8:], "petri-operator"} {
				if forged == sa {
					continue
				}
				ns := controllers.OperatorNamespace(e, []byte("key"), level)
				ns.Annotations[petriv1.AnnotationDeployerServiceAccount] = forged
				err := op.Create(ctx, ns)
				require.Error(t, err, "a namespace of %q naming %s as its deployer (%s is)", name, forged, sa)
				assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'petri-operator-namespaces'", "%v", err)
			}

			ns := controllers.OperatorNamespace(e, []byte("key"), level)
			require.NoError(t, op.Create(ctx, ns), "the namespace of %q, naming %s", name, sa)
			t.Cleanup(func() {
				// Deleted already but for a failed step: a namespace being
				// deleted answers Conflict.
				err := wl.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}})
				assert.True(t, err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err), "%v", err)
			})
			labels := map[string]string{petriv1.LabelEnvironmentUID: string(uid)}
			rb, err := controllers.EnsureAdminBinding(ctx, op, ns.Name, mgmtNS, sa, labels)
			require.NoError(t, err, "bind %s to admin in %s", sa, ns.Name)
			assert.Equal(t, sa, rb.Subjects[0].Name)
			require.NoError(t, wl.Client.Delete(ctx, rb))
			_, err = controllers.EnsureAdminBinding(ctx, op, ns.Name, mgmtNS, sa, labels)
			require.NoError(t, err, "bind %s to admin in %s again, once its binding was deleted", sa, ns.Name)

			for _, subject := range []string{string(other), "petri-operator", "petri-shared-deployer"} {
				rb := &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: naming.DeployerRoleBinding},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
					Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: mgmtNS, Name: subject}},
				}
				err := op.Create(ctx, rb, client.DryRunAll)
				require.Error(t, err, "bind %s to admin in the namespace of %q", subject, name)
				assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'petri-operator-rolebindings'", "%v", err)
			}
			require.NoError(t, op.Delete(ctx, ns), "the operator deletes the namespace")
		})
	}
}

// The operator itself, in the fenced workload cluster, binds an environment
// whose deployer identity carries a hash (its name has a dot), and binds its
// deployer again once the RoleBinding is deleted behind its back.
func TestFencedClusterBindsAndRestoresAHashedDeployer(t *testing.T) {
	wl := workloadCluster(t)
	register(t, "fenced", wl.Config.Host, 10, nil)
	ctx := context.Background()
	const name = "fenced.pr-1"
	sa := naming.DeployerServiceAccount(name)
	require.NotEqual(t, "petri-deployer-fenced-pr-1", sa, "a dotted name's identity carries a hash")
	require.NoError(t, env.Client.Create(ctx, placedIn("fenced", greeter("web"))(name)))
	e := waitFor(t, name, "Ready in the fenced cluster", ready)
	ns := e.Status.TargetNamespace

	var remote corev1.Namespace
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Name: ns}, &remote))
	assert.Equal(t, sa, remote.Annotations[petriv1.AnnotationDeployerServiceAccount])
	rb := &rbacv1.RoleBinding{}
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.DeployerRoleBinding}, rb))
	assert.Equal(t, sa, rb.Subjects[0].Name)

	require.NoError(t, wl.Client.Delete(ctx, rb))
	poke(t, name)
	require.Eventually(t, func() bool {
		got := &rbacv1.RoleBinding{}
		return wl.Client.Get(ctx, client.ObjectKeyFromObject(rb), got) == nil && got.UID != rb.UID && got.Subjects[0].Name == sa
	}, 60*time.Second, 100*time.Millisecond, "the operator binds the deployer again through the fences")

	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), e))
	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
}
