package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/route"
)

// namespaceBinder gives an environment its workload namespace: it places
// the environment on a workload cluster, reserves the namespace's name in
// status, creates the namespace and proves it is the environment's.
type namespaceBinder struct {
	client    client.Client
	apiReader client.Reader
	// namespaceCache reads the namespaces the operator created; nil reads
	// the API server every time.
	namespaceCache client.Reader
	recorder       events.EventRecorder
	options        Options
	clusters       *clusters.Registry
	placer         placer
	proofs         namespaceProofs
	recovery       workloadRecovery
}

// namespaces hands the bind namespace step the reconciler's parts it needs.
func (r *EphemeralEnvironmentReconciler) namespaces() namespaceBinder {
	return namespaceBinder{
		client: r.Client, apiReader: r.APIReader, namespaceCache: r.NamespaceCache,
		recorder: r.Recorder, options: r.Options, clusters: r.clusters,
		placer: placer{client: r.Client, clusters: r.clusters, placements: &r.placements},
		proofs: r.proofs(), recovery: r.recovery(),
	}
}

// bind gives the environment its workload namespace. The name is
// chosen once, committed to status.targetNamespace before the namespace is
// created, and never recomputed once NamespaceBound has been True: not after a
// restart, not after a spec change, not when a shorter hash becomes free. A
// namespace that exists under that name without the environment's ownership
// marks is never adopted.
//
// Between the commit and the first bind the name is only reserved
// (NamespaceBound False, reason NamespaceReserved): the namespace may not
// exist yet, and another environment whose name and short hash collide, or
// anyone else, may create it first. Nothing of the environment has been
// created under a reserved name, so one found taken is given up and the next
// free candidate reserved instead; after the first bind the environment
// stalls with NamespaceNotOwned as before.
func (n namespaceBinder) bind(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	logger := log.FromContext(ctx)
	// A name reserved in this pass was free a moment ago: it is created
	// without reading it first.
	reserved := false
	if env.Status.TargetNamespace == "" && env.Spec.Placement != nil && env.Status.Cluster == "" {
		return n.placeAndReserve(ctx, env, p)
	}
	if env.Status.TargetNamespace == "" {
		if err := n.reserve(ctx, env, ""); err != nil {
			return err
		}
		reserved = true
	}
	if ns, ok := n.boundInCache(ctx, env); ok {
		if err := objects.EnsurePodSecurity(ctx, n.client, ns, n.options.WorkloadPodSecurity); err != nil {
			return err
		}
		return n.recovery.notice(ctx, env, ns)
	}
	var ns *corev1.Namespace
	for given := 0; ; given++ {
		var err error
		if ns, err = n.getOrCreate(ctx, env, reserved); err != nil {
			return err
		}
		why, err := n.proofs.check(ctx, ns, env)
		if err != nil {
			return err
		}
		if why == "" {
			break
		}
		name := env.Status.TargetNamespace
		if !namespaceReserved(env) || given >= maxNamespacesGivenUp {
			msg := fmt.Sprintf("namespace %s exists but is not this environment's (%s); Petri never adopts it", name, why)
			setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionFalse, petriv1.ReasonNamespaceNotOwned, msg)
			p.stalled(petriv1.ReasonNamespaceNotOwned, msg)
			return nil
		}
		logger.Info("Reserved namespace was taken before it was created, reserving another", "namespace", name)
		n.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonNamespaceReserved, "Bind",
			"namespace %s was created by someone else before this environment could create it (%s); reserving another name", name, why)
		if err := n.reserve(ctx, env, name); err != nil {
			return err
		}
		reserved = true
	}
	name := env.Status.TargetNamespace
	if !ns.DeletionTimestamp.IsZero() {
		// Someone deleted our namespace; wait until it is gone, then it is
		// created again under the same, locked name (the namespace watch
		// wakes us).
		setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionFalse, petriv1.ReasonProgressing, "namespace "+name+" is terminating; it is created again once gone")
		p.stop = true
		return nil
	}
	if err := objects.EnsurePodSecurity(ctx, n.client, ns, n.options.WorkloadPodSecurity); err != nil {
		return err
	}
	if !apimeta.IsStatusConditionTrue(env.Status.Conditions, petriv1.ConditionNamespaceBound) || conditionGeneration(env, petriv1.ConditionNamespaceBound) != env.Generation {
		setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionTrue, petriv1.ReasonNamespaceBindSucceeded, "bound to namespace "+name)
	}
	return n.recovery.notice(ctx, env, ns)
}

// maxNamespacesGivenUp bounds how many reserved names one pass gives up
// before it reports the last one as not owned; it only takes more when
// namespaces keep appearing under the very names being reserved.
const maxNamespacesGivenUp = 3

// namespaceReserved reports whether the environment's target namespace is
// still only reserved: committed, never bound.
func namespaceReserved(env *petriv1.EphemeralEnvironment) bool {
	c := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionNamespaceBound)
	return env.Status.TargetNamespace != "" && c != nil && c.Status == metav1.ConditionFalse && c.Reason == petriv1.ReasonNamespaceReserved
}

// reserve chooses the first free candidate and commits it to
// status.targetNamespace, with optimistic locking: a conflict means someone
// else moved, and the next reconcile re-reads instead of guessing. taken is
// the reserved name just given up, if any.
func (n namespaceBinder) reserve(ctx context.Context, env *petriv1.EphemeralEnvironment, taken string) error {
	name, err := n.choose(ctx, env)
	if err != nil {
		setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionFalse, petriv1.ReasonNamespaceBindFailed, err.Error())
		return err
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	base := env.DeepCopy()
	if t := route.Of(ctx); t != nil && env.Status.Cluster == "" {
		// The placement is committed with the name, in the same write.
		env.Status.Cluster = t.Name
		setCondition(env, petriv1.ConditionClusterPlaced, metav1.ConditionTrue, petriv1.ReasonClusterPlaced, "placed in workload cluster "+t.Name)
	}
	env.Status.TargetNamespace = name
	env.Status.NamespaceNonce = nonce
	msg := "namespace " + name + " reserved, creating it"
	if taken != "" {
		msg = fmt.Sprintf("namespace %s reserved (%s was taken before it could be created), creating it", name, taken)
	}
	setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionFalse, petriv1.ReasonNamespaceReserved, msg)
	if err := n.client.Status().Patch(ctx, env, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		env.Status = base.Status
		return fmt.Errorf("commit target namespace %s: %w", name, err)
	}
	log.FromContext(ctx).Info("Committed target namespace", "namespace", name, "cluster", env.Status.Cluster)
	return nil
}

// placeAndReserve decides the workload cluster of an environment with a
// placement and commits it with the namespace's name, chosen among the
// names free in that cluster, in one status write; the pass ends there and
// the next works in that cluster. While no cluster fits, the environment
// waits, ClusterPlaced False saying why.
func (n namespaceBinder) placeAndReserve(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	p.stop = true
	cluster, release, err := n.placer.place(ctx, env)
	committed := false
	defer func() { release(committed) }()
	if err != nil || cluster == "" {
		// A cluster connecting answers within moments: its first probe
		// is looked for sooner than one that is down or full.
		p.requeueAfter(clusters.PendingPoll)
		return err
	}
	t, why, _ := n.clusters.State(cluster)
	if t == nil {
		setCondition(env, petriv1.ConditionClusterPlaced, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable, why)
		p.requeueAfter(clusterAwayPoll)
		return nil
	}
	if err := n.reserve(route.With(ctx, t), env, ""); err != nil {
		return err
	}
	committed = true
	return nil
}

// rotateNonce commits a fresh status.namespaceNonce, with optimistic
// locking like the reservation.
func (n namespaceBinder) rotateNonce(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	base := env.DeepCopy()
	env.Status.NamespaceNonce = nonce
	if err := n.client.Status().Patch(ctx, env, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		env.Status = base.Status
		return fmt.Errorf("commit namespace nonce: %w", err)
	}
	return nil
}

// getOrCreate reads the target namespace from the API server and
// creates it when it does not exist; one just found free (fresh) is created
// without the read. A namespace that appears before the create is read
// then, for the ownership check.
func (n namespaceBinder) getOrCreate(ctx context.Context, env *petriv1.EphemeralEnvironment, fresh bool) (*corev1.Namespace, error) {
	name := env.Status.TargetNamespace
	ns := &corev1.Namespace{}
	if !fresh {
		err := n.apiReader.Get(ctx, client.ObjectKey{Name: name}, ns)
		if err == nil {
			return ns, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("get namespace %s: %w", name, err)
		}
	}
	key, err := n.proofs.key.get(ctx, n.client, n.apiReader, n.options.ManagementNamespace)
	if err != nil {
		return nil, err
	}
	if env.Status.NamespaceNonce == "" {
		// An environment from before nonces: one is committed first.
		if err := n.rotateNonce(ctx, env); err != nil {
			return nil, err
		}
	}
	ns = objects.WithPodSecurity(newOwnedNamespace(env, key), n.options.WorkloadPodSecurity)
	err = n.client.Create(ctx, ns)
	switch {
	case err == nil:
		log.FromContext(ctx).Info("Created workload namespace", "namespace", name)
		return ns, nil
	case apierrors.IsAlreadyExists(err):
		ns = &corev1.Namespace{}
		if err := n.apiReader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			return nil, fmt.Errorf("get namespace %s: %w", name, err)
		}
		return ns, nil
	}
	reason, msg := petriv1.ReasonNamespaceBindFailed, fmt.Sprintf("create namespace %s: %v", name, err)
	if namespaceReserved(env) {
		// Still only reserved: the reason says so, for the next pass.
		reason, msg = petriv1.ReasonNamespaceReserved, fmt.Sprintf("namespace %s reserved; creating it failed: %v", name, err)
	}
	setCondition(env, petriv1.ConditionNamespaceBound, metav1.ConditionFalse, reason, msg)
	return nil, fmt.Errorf("create namespace %s: %w", name, err)
}

// boundInCache returns the environment's namespace when NamespaceBound is
// already true for this generation and the cache of the namespaces the
// operator created holds it, provably the environment's and not
// terminating: then nothing is left to bind and no request is needed (the
// read was one round trip on every pass of every environment;
// docs/benchmarks.md has the figures). Everything else (not cached yet,
// relabelled, terminating, gone, a new generation) is decided on the API
// server's answer, as are the writes that follow from it.
func (n namespaceBinder) boundInCache(ctx context.Context, env *petriv1.EphemeralEnvironment) (*corev1.Namespace, bool) {
	if n.namespaceCache == nil || !apimeta.IsStatusConditionTrue(env.Status.Conditions, petriv1.ConditionNamespaceBound) ||
		conditionGeneration(env, petriv1.ConditionNamespaceBound) != env.Generation {
		return nil, false
	}
	ns := &corev1.Namespace{}
	if err := n.namespaceCache.Get(ctx, client.ObjectKey{Name: env.Status.TargetNamespace}, ns); err != nil {
		return nil, false
	}
	why, err := n.proofs.check(ctx, ns, env)
	return ns, err == nil && why == "" && ns.DeletionTimestamp.IsZero()
}

func conditionGeneration(env *petriv1.EphemeralEnvironment, typ string) int64 {
	if c := apimeta.FindStatusCondition(env.Status.Conditions, typ); c != nil {
		return c.ObservedGeneration
	}
	return -1
}

// choose returns the first candidate (shortest hash prefix) that no
// existing namespace uses.
func (n namespaceBinder) choose(ctx context.Context, env *petriv1.EphemeralEnvironment) (string, error) {
	hash := naming.UIDHash(env.UID)
	if n.options.NamespaceHash != nil {
		hash = n.options.NamespaceHash(string(env.UID))
	}
	for _, candidate := range naming.NamespaceCandidates(env.Name, hash) {
		err := n.apiReader.Get(ctx, client.ObjectKey{Name: candidate}, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}})
		if apierrors.IsNotFound(err) {
			return candidate, nil
		}
		if err != nil {
			return "", fmt.Errorf("check namespace %s: %w", candidate, err)
		}
	}
	return "", fmt.Errorf("every namespace name derived from %q is taken", env.Name)
}

// newOwnedNamespace is the namespace Petri creates for an environment: the
// ownership marks of ownedNamespace, the annotation naming the deployer
// identity that the admission fences allow to be bound to admin there, and
// the ownership proof made with key. Its Pod Security level is added where
// it is created (objects.WithPodSecurity).
func newOwnedNamespace(env *petriv1.EphemeralEnvironment, key []byte) *corev1.Namespace {
	ns := ownedNamespace(env)
	ns.Annotations[petriv1.AnnotationDeployerServiceAccount] = naming.DeployerServiceAccount(env.Name)
	ns.Annotations[petriv1.AnnotationOwnershipProof] = ownershipProof(key, ns.Name, string(env.UID), env.Status.NamespaceNonce)
	return ns
}

// ownedNamespace carries the marks that prove a namespace is the
// environment's: labels and an annotation name the environment and its UID.
func ownedNamespace(env *petriv1.EphemeralEnvironment) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: env.Status.TargetNamespace,
		Labels: map[string]string{
			petriv1.LabelManagedBy:      petriv1.ManagedByOperator,
			petriv1.LabelEnvironment:    naming.LabelValue(env.Name),
			petriv1.LabelEnvironmentUID: string(env.UID),
		},
		Annotations: map[string]string{
			petriv1.AnnotationEnvironment:    env.Namespace + "/" + env.Name,
			petriv1.AnnotationEnvironmentUID: string(env.UID),
		},
	}}
}

// ownershipProblem returns why ns does not carry the environment's marks, or
// "". Marks alone can be copied: namespaceProofs.check decides.
func ownershipProblem(ns *corev1.Namespace, env *petriv1.EphemeralEnvironment) string {
	want := ownedNamespace(env)
	var problems []string
	for k, v := range want.Labels {
		if got, ok := ns.Labels[k]; !ok || got != v {
			problems = append(problems, fmt.Sprintf("label %s=%q", k, got))
		}
	}
	for k, v := range want.Annotations {
		if got, ok := ns.Annotations[k]; !ok || got != v {
			problems = append(problems, fmt.Sprintf("annotation %s=%q", k, got))
		}
	}
	if len(problems) == 0 {
		return ""
	}
	slices.Sort(problems)
	return "expected ownership marks differ: " + strings.Join(problems, ", ")
}

func splitKey(s string) (string, string, bool) {
	ns, name, ok := strings.Cut(s, "/")
	return ns, name, ok && ns != "" && name != ""
}
