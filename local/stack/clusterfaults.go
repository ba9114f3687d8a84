package stack

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// Revocation is the management cluster's access to a workload cluster,
// revoked by RevokeClusterCredentials; Restore gives it back.
type Revocation struct {
	s       *Stack
	w       *workloadCluster
	account *corev1.ServiceAccount
}

// workloadClusterNamed is the workload cluster of that name; nil when the
// stack runs none.
func (s *Stack) workloadClusterNamed(name string) *workloadCluster {
	for _, w := range s.workload {
		if w.name == name {
			return w
		}
	}
	return nil
}

// RevokeClusterCredentials revokes Petri's access to a workload cluster the
// way that cluster's administrator does (docs/clusters.md): it deletes the
// ServiceAccount petri-operator there, which invalidates every token of
// it, the one in the Secret ClusterSecretName(name) included. The Secret is
// left as it is. It returns once the workload cluster refuses that token.
func (s *Stack) RevokeClusterCredentials(ctx context.Context, name string) (*Revocation, error) {
	w := s.workloadClusterNamed(name)
	if w == nil {
		return nil, fmt.Errorf("no workload cluster %s", name)
	}
	key := client.ObjectKey{Namespace: ManagementNamespace, Name: OperatorServiceAccount}
	var sa corev1.ServiceAccount
	if err := w.cluster.Client.Get(ctx, key, &sa); err != nil {
		return nil, fmt.Errorf("read serviceaccount %s in workload cluster %s: %w", key, name, err)
	}
	if err := w.cluster.Client.Delete(ctx, &sa, client.Preconditions{UID: &sa.UID}); err != nil {
		return nil, fmt.Errorf("delete serviceaccount %s in workload cluster %s: %w", key, name, err)
	}
	rv := &Revocation{s: s, w: w, account: sa.DeepCopy()}
	err := poll(ctx, time.Minute, func() (bool, error) {
		err := s.clusterSecretAuthenticates(ctx, w)
		return apierrors.IsUnauthorized(err), nil
	}, func() string { return "workload cluster " + name + " still accepts the revoked token" })
	return rv, err
}

// Restore creates the ServiceAccount petri-operator again as it was
// installed (its RBAC bindings name it, so it has its rights again) and
// writes a kubeconfig with a new token of it into the management
// cluster's Secret, as the registration did. It returns once the workload
// cluster accepts the new token.
func (rv *Revocation) Restore(ctx context.Context) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace: rv.account.Namespace, Name: rv.account.Name,
		Labels: rv.account.Labels, Annotations: rv.account.Annotations,
	}}
	if err := rv.w.cluster.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create serviceaccount %s/%s in workload cluster %s: %w", sa.Namespace, sa.Name, rv.w.name, err)
	}
	if _, err := rv.s.writeClusterSecret(ctx, rv.w); err != nil {
		return err
	}
	var last error
	return poll(ctx, time.Minute, func() (bool, error) {
		last = rv.s.clusterSecretAuthenticates(ctx, rv.w)
		return last == nil, nil
	}, func() string { return fmt.Sprintf("workload cluster %s refuses the new token: %v", rv.w.name, last) })
}

// clusterSecretAuthenticates asks the workload cluster who the kubeconfig
// of the management cluster's Secret is; nil when it answers. No part of
// the Secret goes into the error.
func (s *Stack) clusterSecretAuthenticates(ctx context.Context, w *workloadCluster) error {
	var secret corev1.Secret
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: ManagementNamespace, Name: ClusterSecretName(w.name)}, &secret); err != nil {
		return fmt.Errorf("read Secret %s: %w", ClusterSecretName(w.name), err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[petriv1.DefaultClusterCredentialsKey])
	if err != nil {
		return fmt.Errorf("Secret %s holds no kubeconfig", ClusterSecretName(w.name))
	}
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client of Secret %s: %w", ClusterSecretName(w.name), err)
	}
	_, err = cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err
}
