package stack

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
)

// startClusters starts a management control plane with its management
// namespace, as Petri's installation leaves it, and the stack's workload
// clusters for three clusters beside it: the path Start takes, without
// the operator, sync and forges.
func startClusters(t *testing.T) *Stack {
	t.Helper()
	// kubectl reads config/workload: a change there runs the test again.
	require.NoError(t, controlplane.RegisterInputs("config"))
	assets, err := controlplane.AssetsDir()
	require.NoError(t, err)
	root, err := controlplane.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	s := &Stack{root: root, opts: Options{
		Dir: dir, Clusters: 3, Install: InstallKustomize, Node: NodeProcess,
		Binaries: map[string]string{BinKubectl: filepath.Join(assets, BinKubectl)},
	}}
	require.NoError(t, s.opts.checkClusters())
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "cluster"), 0o755))
	s.Cluster, err = controlplane.Start(controlplane.Options{Dir: filepath.Join(dir, "cluster")})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	s.Client = s.Cluster.Client
	ctx := context.Background()
	require.NoError(t, s.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ManagementNamespace}}))
	require.NoError(t, s.startWorkloadClusters(ctx, NewReport(os.Stderr), map[string]string{}, "ghcr.io/petri-dev/petri-deployer:v0.1.0"))
	return s
}

// With three clusters the stack runs two workload clusters, east and west,
// each its own API server with its own Ready node, Petri's fenced identity
// there and its credentials registered in the management cluster.
func TestWorkloadClustersAreSeparateFencedAndRegistered(t *testing.T) {
	s := startClusters(t)
	ctx := context.Background()
	clusters := s.WorkloadClusters()
	require.Len(t, clusters, 2)
	require.Contains(t, clusters, "east")
	require.Contains(t, clusters, "west")
	assert.NotEqual(t, clusters["east"].Config.Host, clusters["west"].Config.Host)

	for name, c := range clusters {
		t.Run(name+" is its own API server", func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-" + name}}
			require.NoError(t, c.Client.Create(ctx, ns))
			for other, oc := range map[string]*controlplane.Cluster{"management": s.Cluster, "east": clusters["east"], "west": clusters["west"]} {
				if other != name {
					err := oc.Client.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
					assert.True(t, apierrors.IsNotFound(err), "namespace %s is absent in %s: %v", ns.Name, other, err)
				}
			}
			// Petri's workload-cluster objects, without its CRDs.
			_, err := c.Clientset.Discovery().ServerResourcesForGroupVersion(petriv1.GroupVersion.String())
			assert.True(t, apierrors.IsNotFound(err), "no Petri CRD in a workload cluster: %v", err)
			_, err = s.Cluster.Clientset.Discovery().ServerResourcesForGroupVersion(petriv1.GroupVersion.String())
			assert.NoError(t, err, "the management cluster has them")
			var cm corev1.ConfigMap
			require.NoError(t, c.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: "petri-operator"}, &cm))
			assert.Equal(t, strings.Join(s.stepImages(), ","), cm.Data["step-images"], "the fences' settings are the management cluster's")
			var deployments appsv1.DeploymentList
			require.NoError(t, c.Client.List(ctx, &deployments))
			assert.Empty(t, deployments.Items, "no operator or sync runs in a workload cluster")
		})
		t.Run(name+"'s node is Ready there", func(t *testing.T) {
			nodeName := "petri-local-node-" + name
			require.Eventually(t, func() bool {
				var n corev1.Node
				if err := c.Client.Get(ctx, client.ObjectKey{Name: nodeName}, &n); err != nil {
					return false
				}
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady {
						return cond.Status == corev1.ConditionTrue
					}
				}
				return false
			}, 30*time.Second, 50*time.Millisecond, "node %s Ready in %s", nodeName, name)
			var nodes corev1.NodeList
			require.NoError(t, c.Client.List(ctx, &nodes))
			require.Len(t, nodes.Items, 1, "only its own node registered to %s", name)
		})
		t.Run(name+"'s Secret is its petri-operator, fenced", func(t *testing.T) {
			assertOperatorIdentity(t, s, name, c)
		})
	}

	t.Run("WorkloadClusters in the management cluster", func(t *testing.T) {
		var list petriv1.WorkloadClusterList
		require.NoError(t, s.Client.List(ctx, &list, client.InNamespace(ManagementNamespace)))
		require.Len(t, list.Items, 2)
		for _, wc := range list.Items {
			assert.Equal(t, wc.Name, wc.Labels[RegionLabel])
			assert.Equal(t, ClusterSecretName(wc.Name), wc.Spec.Credentials.Name)
			assert.Equal(t, petriv1.DefaultClusterCredentialsKey, wc.Spec.Credentials.Key)
			assert.Equal(t, int32(WorkloadClusterCapacity), wc.Spec.Capacity.Environments)
			assert.False(t, wc.Spec.Cordoned)
		}
	})
}

// operatorClient reads the workload cluster's Secret from the management
// cluster and returns a clientset of its kubeconfig and the raw kubeconfig.
func operatorClient(t *testing.T, s *Stack, name string) (kubernetes.Interface, []byte) {
	t.Helper()
	var secret corev1.Secret
	require.NoError(t, s.Client.Get(context.Background(), client.ObjectKey{Namespace: ManagementNamespace, Name: ClusterSecretName(name)}, &secret))
	data := secret.Data[petriv1.DefaultClusterCredentialsKey]
	require.NotEmpty(t, data)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	require.NoError(t, err)
	// The refused Job is not meant to meet Pod Security: no warnings of it.
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs, data
}

// assertOperatorIdentity checks that the Secret's kubeconfig authenticates
// as petri-system/petri-operator in the workload cluster and nowhere else,
// with an expiring token, and that the fences there hold it: it may create
// a namespace marked as an environment's and the RoleBinding to admin in
// it, but no Deployment in kube-system, no unmarked namespace, no other
// RoleBinding and no Job of another image.
func assertOperatorIdentity(t *testing.T, s *Stack, name string, c *controlplane.Cluster) {
	ctx := context.Background()
	cs, kubeconfig := operatorClient(t, s, name)
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "system:serviceaccount:petri-system:petri-operator", review.Status.UserInfo.Username)
	assertTokenExpires(t, kubeconfig)
	for other, oc := range s.WorkloadClusters() {
		if other == name {
			continue
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
		require.NoError(t, err)
		cfg.Host, cfg.CAData = oc.Config.Host, oc.Config.CAData
		elsewhere, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		_, err = elsewhere.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		assert.True(t, apierrors.IsUnauthorized(err), "%s's token is refused by %s: %v", name, other, err)
	}

	uid := "0b7a6c3e-" + name
	sa := "petri-deployer-" + name
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "env-" + name,
		Labels: map[string]string{
			"app.kubernetes.io/managed-by": "petri-operator", "petri.dev/environment-uid": uid,
			"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "latest",
		},
		Annotations: map[string]string{
			"petri.dev/environment": ManagementNamespace + "/" + name, "petri.dev/environment-uid": uid,
			"petri.dev/deployer-serviceaccount": sa,
		},
	}}
	_, err = cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	require.NoError(t, err, "petri-operator creates a namespace marked as an environment's")
	require.NoError(t, c.Client.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{}), "in %s itself", name)
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "petri-deployer", Namespace: ns.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ManagementNamespace, Name: sa}},
	}
	_, err = cs.RbacV1().RoleBindings(ns.Name).Create(ctx, rb, metav1.CreateOptions{})
	require.NoError(t, err, "petri-operator binds admin to the deployer in the environment's namespace")

	refused := map[string]error{}
	_, refused["a Deployment in kube-system"] = cs.AppsV1().Deployments("kube-system").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}},
			},
		},
	}, metav1.CreateOptions{})
	_, refused["an unmarked namespace"] = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain-" + name}}, metav1.CreateOptions{})
	rb.Namespace = "kube-system"
	_, refused["a RoleBinding in kube-system"] = cs.RbacV1().RoleBindings("kube-system").Create(ctx, rb, metav1.CreateOptions{})
	_, refused["a Job of another image"] = cs.BatchV1().Jobs(ManagementNamespace).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			ServiceAccountName: sa, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "x", Image: "busybox"}},
		}}},
	}, metav1.CreateOptions{})
	for what, err := range refused {
		assert.True(t, apierrors.IsForbidden(err), "%s is refused in %s: %v", what, name, err)
	}
	// Only RBAC stops the Deployment; the others the operator's RBAC allows,
	// and the fences refuse.
	for _, what := range []string{"an unmarked namespace", "a RoleBinding in kube-system", "a Job of another image"} {
		if err := refused[what]; err != nil {
			assert.Contains(t, err.Error(), "petri-operator may", "%s is refused by a fence", what)
		}
	}
}

// assertTokenExpires checks the kubeconfig's token lives ClusterTokenLifetime.
func assertTokenExpires(t *testing.T, kubeconfig []byte) {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	require.NoError(t, err)
	auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	parts := strings.Split(auth.Token, ".")
	require.Len(t, parts, 3, "a JWT")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct{ Iat, Exp int64 }
	require.NoError(t, json.Unmarshal(payload, &claims))
	assert.Equal(t, int64(ClusterTokenLifetime/time.Second), claims.Exp-claims.Iat)
}
