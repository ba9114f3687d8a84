package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers"
)

// reachableReason waits until the WorkloadCluster's Reachable condition has
// the reason, and returns the condition.
func reachableReason(t *testing.T, name, reason string) metav1.Condition {
	t.Helper()
	wc := &petriv1.WorkloadCluster{}
	var c *metav1.Condition
	ok := eventually(60*time.Second, func() bool {
		if env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, wc) != nil {
			return false
		}
		c = apimeta.FindStatusCondition(wc.Status.Conditions, petriv1.ConditionReachable)
		return c != nil && c.Reason == reason
	})
	require.True(t, ok, "workload cluster %s never had the reason %s: %+v", name, reason, c)
	assert.Equal(t, metav1.ConditionFalse, c.Status, "a cluster found %s is not Reachable", reason)
	return *c
}

// A kubeconfig of the workload cluster's administrator authenticates and
// reads the fences, but no fence matches its requests: the cluster is not
// Reachable, and the reason names the identity found and the one expected.
func TestWorkloadClusterAdminCredentialsAreNotPetri(t *testing.T) {
	wl := workloadCluster(t)
	ctx := context.Background()
	admin := wl.Config
	require.NotEmpty(t, admin.CertData, "the control plane's administrator has an inline client certificate")
	review, err := wl.Clientset.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	adminName := review.Status.UserInfo.Username

	kc := clientcmdapi.NewConfig()
	kc.Clusters["admin"] = &clientcmdapi.Cluster{Server: admin.Host, CertificateAuthorityData: admin.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: admin.CertData, ClientKeyData: admin.KeyData}
	kc.Contexts["admin"] = &clientcmdapi.Context{Cluster: "admin", AuthInfo: "admin"}
	kc.CurrentContext = "admin"
	data, err := clientcmd.Write(*kc)
	require.NoError(t, err)
	registerKubeconfig(t, "admin", data, 10, nil)

	c := reachableReason(t, "admin", petriv1.ReasonCredentialsNotPetri)
	assert.Contains(t, c.Message, "authenticate as "+adminName)
	assert.Contains(t, c.Message, controllers.OperatorUsername(mgmtNS))
	assert.NotContains(t, c.Message, string(admin.KeyData))

	// Nothing is placed there.
	e := placedIn("admin", greeter("web"))("to-admin")
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	e = waitFor(t, "to-admin", "waiting for its cluster", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionClusterPlaced, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable)
	})
	assert.Empty(t, e.Status.Cluster)
	assert.Empty(t, e.Status.TargetNamespace)
}

// A kubeconfig that would make the operator run a command, read a file of
// its own pod, or trust any server is refused before the operator connects
// with it, the reason naming the field and nothing of the Secret.
func TestWorkloadClusterUnsafeKubeconfigIsRefused(t *testing.T) {
	wl := workloadCluster(t)
	dir := t.TempDir()
	token := workload.operatorConfig.BearerToken
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	ran := filepath.Join(dir, "plugin-ran")
	plugin := filepath.Join(dir, "plugin")
	require.NoError(t, os.WriteFile(plugin, []byte(fmt.Sprintf(`#!/bin/sh
touch %s
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}'
`, ran, token)), 0o700))

	cases := []struct {
		name  string
		edit  func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)
		field string
	}{
		{"insecure", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
			c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
		}, "cluster.insecure-skip-tls-verify"},
		{"tokenfile", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token, u.TokenFile = "", tokenFile
		}, "user.tokenFile"},
		{"exec", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Token = ""
			u.Exec = &clientcmdapi.ExecConfig{Command: plugin, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		}, "user.exec"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "unsafe-" + tc.name
			kc, err := clientcmd.Load(operatorKubeconfig(t, name, wl.Config.Host))
			require.NoError(t, err)
			tc.edit(kc.Clusters[name], kc.AuthInfos["petri-operator"])
			data, err := clientcmd.Write(*kc)
			require.NoError(t, err)
			registerKubeconfig(t, name, data, 10, nil)

			c := reachableReason(t, name, petriv1.ReasonCredentialsUnsafe)
			assert.Contains(t, c.Message, tc.field)
			for _, v := range []string{token, tokenFile, plugin} {
				assert.NotContains(t, c.Message, v, "the message quotes the Secret")
			}
		})
	}
	_, err := os.Stat(ran)
	assert.True(t, os.IsNotExist(err), "the operator ran the kubeconfig's exec command: %v", err)
}

// A fence that is installed and bound but refuses nothing is found by the
// probe's server-side dry runs: the cluster is not Reachable until it
// refuses again. A binding that only audits is found missing.
func TestWorkloadClusterFenceThatDoesNotRefuseIsFound(t *testing.T) {
	wl := workloadCluster(t)
	ctx := context.Background()
	register(t, "fenced", wl.Config.Host, 10, nil)

	cases := []struct {
		name   string
		obj    client.Object
		edit   func(client.Object)
		reason string
		says   string
	}{
		{"policy matches another user", &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "petri-operator-namespaces"}},
			func(o client.Object) {
				p := o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
				p.Spec.MatchConditions[0].Expression = "request.userInfo.username == 'system:serviceaccount:petri-system:someone-else'"
			}, petriv1.ReasonFencesNotEnforced, "fence petri-operator-namespaces"},
		{"binding matches no object", &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "petri-operator-jobs"}},
			func(o client.Object) {
				b := o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
				b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"petri.dev/fenced": "never"}}}
			}, petriv1.ReasonFencesNotEnforced, "fence petri-operator-jobs"},
		{"binding audits only", &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "petri-operator-rolebindings"}},
			func(o client.Object) {
				b := o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
				b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
			}, petriv1.ReasonFencesMissing, "ValidatingAdmissionPolicyBinding petri-operator-rolebindings"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, wl.Client.Get(ctx, client.ObjectKeyFromObject(tc.obj), tc.obj))
			original := tc.obj.DeepCopyObject().(client.Object)
			restore := func() {
				require.NoError(t, wl.Client.Get(ctx, client.ObjectKeyFromObject(tc.obj), tc.obj))
				original.SetResourceVersion(tc.obj.GetResourceVersion())
				require.NoError(t, wl.Client.Update(ctx, original))
			}
			tc.edit(tc.obj)
			require.NoError(t, wl.Client.Update(ctx, tc.obj))
			restored := false
			t.Cleanup(func() {
				if !restored {
					restore()
				}
			})

			c := reachableReason(t, "fenced", tc.reason)
			assert.Contains(t, c.Message, tc.says)

			restore()
			restored = true
			waitCluster(t, "fenced", "Reachable again once the fence refuses", func(wc *petriv1.WorkloadCluster) bool {
				return apimeta.IsStatusConditionTrue(wc.Status.Conditions, petriv1.ConditionReachable)
			})
		})
	}

	// The dry runs stored nothing.
	err := wl.Client.Get(ctx, client.ObjectKey{Name: "petri-fence-probe"}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "the probe's namespace: %v", err)
	var rbs rbacv1.RoleBindingList
	require.NoError(t, wl.Client.List(ctx, &rbs, client.InNamespace(metav1.NamespaceSystem)))
	for _, rb := range rbs.Items {
		assert.NotEqual(t, "petri-fence-probe", rb.Name, "the probe's RoleBinding")
	}
	var jobs batchv1.JobList
	require.NoError(t, wl.Client.List(ctx, &jobs, client.InNamespace(mgmtNS)))
	for _, j := range jobs.Items {
		assert.NotEqual(t, "petri-fence-probe", j.Name, "the probe's Job")
	}
}

// A workload cluster installed without the rights the health watch reads
// with (a workload mode of an older version): the connection's cache cannot
// sync, and the cluster is not Reachable, the reason naming the read its
// identity may not make. Granted again, the cluster is Reachable.
func TestWorkloadClusterWithoutTheHealthWatchsRightsIsRejected(t *testing.T) {
	wl := workloadCluster(t)
	ctx := context.Background()
	var role rbacv1.ClusterRole
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Name: "petri-operator"}, &role))
	granted := role.DeepCopy().Rules
	setRules := func(rules []rbacv1.PolicyRule) error {
		var r rbacv1.ClusterRole
		if err := wl.Client.Get(ctx, client.ObjectKey{Name: "petri-operator"}, &r); err != nil {
			return err
		}
		r.Rules = rules
		return wl.Client.Update(ctx, &r)
	}
	t.Cleanup(func() { require.NoError(t, setRules(granted)) })
	var withoutApps []rbacv1.PolicyRule
	for _, rule := range granted {
		if len(rule.APIGroups) != 1 || rule.APIGroups[0] != "apps" {
			withoutApps = append(withoutApps, rule)
		}
	}
	require.Len(t, withoutApps, len(granted)-1, "one rule of the ClusterRole grants the apps kinds")
	require.NoError(t, setRules(withoutApps))

	registerKubeconfig(t, "blind", operatorKubeconfig(t, "blind", wl.Config.Host), 10, nil)
	c := reachableReason(t, "blind", petriv1.ReasonCredentialsRejected)
	assert.Contains(t, c.Message, "may not list deployments.apps in every namespace")

	require.NoError(t, setRules(granted))
	waitCluster(t, "blind", "reachable once granted", func(wc *petriv1.WorkloadCluster) bool {
		return apimeta.IsStatusConditionTrue(wc.Status.Conditions, petriv1.ConditionReachable)
	})
}
