package controllers

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// ownershipKeyLen is the length of the operator's ownership key in bytes.
const ownershipKeyLen = 32

// ownershipKey holds the operator's key for ownership proofs once read.
type ownershipKey struct {
	mu  sync.Mutex
	key []byte
}

// get returns the key, reading the Secret petriv1.OwnershipKeySecret from
// the management namespace and creating it with a random key the first
// time any operator needs it. Two operators creating it at once agree on
// the one the API server kept.
func (k *ownershipKey) get(ctx context.Context, c client.Client, reader client.Reader, namespace string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	key := client.ObjectKey{Namespace: namespace, Name: petriv1.OwnershipKeySecret}
	for range 2 {
		s := &corev1.Secret{}
		err := reader.Get(ctx, key, s)
		if err == nil {
			if len(s.Data["key"]) < ownershipKeyLen {
				return nil, fmt.Errorf("secret %s: key %q holds %d bytes, want at least %d", key, "key", len(s.Data["key"]), ownershipKeyLen)
			}
			k.key = s.Data["key"]
			return k.key, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read ownership key %s: %w", key, err)
		}
		b := make([]byte, ownershipKeyLen)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("generate ownership key: %w", err)
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: petriv1.OwnershipKeySecret,
				Labels: map[string]string{petriv1.LabelManagedBy: petriv1.ManagedByOperator}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"key": b},
		}
		err = c.Create(ctx, s)
		if err == nil {
			k.key = b
			return k.key, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create ownership key %s: %w", key, err)
		}
	}
	return nil, fmt.Errorf("ownership key %s: created and deleted again while it was read", key)
}

// ownershipProof is the proof a namespace of that name, made for the
// environment with that UID under that nonce, carries.
func ownershipProof(key []byte, namespace, uid, nonce string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("petri.dev/namespace\x00" + namespace + "\x00" + uid + "\x00" + nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// newNonce returns a fresh value for status.namespaceNonce.
func newNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate namespace nonce: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// namespaceProofs checks and spends the ownership proofs of the workload
// namespaces, with the key kept in the management namespace.
type namespaceProofs struct {
	client    client.Client
	apiReader client.Reader
	namespace string
	key       *ownershipKey
}

// proofs hands the steps the reconciler's namespace ownership proofs.
func (r *EphemeralEnvironmentReconciler) proofs() namespaceProofs {
	return namespaceProofs{client: r.Client, apiReader: r.APIReader, namespace: r.Options.ManagementNamespace, key: &r.ownership}
}

// check tells whether ns is provably env's, and why not
// when it is not. The marks (labels and annotations naming the
// environment) must match, and one of:
//   - ns is the very namespace recorded in status.namespaceUID;
//   - ns carries a valid ownership proof for the nonce in status (the
//     operator made it, after it committed that nonce);
//   - the environment was bound before namespaces were recorded by UID
//     (status.namespaceUID empty, NamespaceBound True): the marks alone,
//     as they were then.
func (o namespaceProofs) check(ctx context.Context, ns *corev1.Namespace, env *petriv1.EphemeralEnvironment) (string, error) {
	if why := ownershipProblem(ns, env); why != "" {
		return why, nil
	}
	if env.Status.NamespaceUID != "" && string(ns.UID) == env.Status.NamespaceUID {
		return "", nil
	}
	if env.Status.NamespaceUID == "" && apimeta.IsStatusConditionTrue(env.Status.Conditions, petriv1.ConditionNamespaceBound) {
		return "", nil
	}
	key, err := o.key.get(ctx, o.client, o.apiReader, o.namespace)
	if err != nil {
		return "", err
	}
	want := ownershipProof(key, ns.Name, string(env.UID), env.Status.NamespaceNonce)
	if got := ns.Annotations[petriv1.AnnotationOwnershipProof]; env.Status.NamespaceNonce == "" || !hmac.Equal([]byte(got), []byte(want)) {
		return fmt.Sprintf("its marks are right but it carries no valid %s annotation: it was not made by Petri's operator", petriv1.AnnotationOwnershipProof), nil
	}
	return "", nil
}

// spend retires the nonce the bound namespace's proof was made with, as
// soon as the namespace is verified: from then on that namespace is known by
// its UID (status.namespaceUID), and a copy of its proof, put on another
// namespace of the same name after it is deleted, no longer matches the
// nonce in status. The operator makes a namespace only under a nonce no
// namespace it verified carries.
func (o namespaceProofs) spend(ctx context.Context, env *petriv1.EphemeralEnvironment, ns *corev1.Namespace) error {
	proof := ns.Annotations[petriv1.AnnotationOwnershipProof]
	if proof == "" || env.Status.NamespaceNonce == "" {
		return nil
	}
	key, err := o.key.get(ctx, o.client, o.apiReader, o.namespace)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(proof), []byte(ownershipProof(key, ns.Name, string(env.UID), env.Status.NamespaceNonce))) {
		return nil
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	env.Status.NamespaceNonce = nonce
	return nil
}
