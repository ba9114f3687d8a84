package controllers_test

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// greeter is a component that deploys the example chart from its path,
// without waiting for its pods, which run nowhere here (see component).
func greeter(name string, dependsOn ...string) petriv1.Component {
	return petriv1.Component{
		Name:      name,
		Chart:     petriv1.ChartReference{Repository: imageCharts, Name: "greeter", Version: "0.1.0"},
		DependsOn: dependsOn,
		Release:   noWait(),
	}
}

func bound(e *petriv1.EphemeralEnvironment) bool {
	return e.Status.TargetNamespace != "" && conditionIs(e, petriv1.ConditionNamespaceBound, metav1.ConditionTrue, petriv1.ReasonNamespaceBindSucceeded)
}

func rv(t *testing.T, o metav1.Object) uint64 {
	n, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	require.NoError(t, err)
	return n
}

// The name is committed to status before the namespace exists: in etcd's
// single revision order, the status write that carries targetNamespace comes
// before the namespace's creation.
func TestNamespaceIsCommittedBeforeItIsCreated(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "commit-order", succeedAll)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nsWatch, err := env.Clientset.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{LabelSelector: petriv1.LabelEnvironment + "=commit-order"})
	require.NoError(t, err)
	defer nsWatch.Stop()
	eeWatch, err := env.Client.Watch(ctx, &petriv1.EphemeralEnvironmentList{}, client.InNamespace(mgmtNS), client.MatchingFields{"metadata.name": "commit-order"})
	require.NoError(t, err)
	defer eeWatch.Stop()

	require.NoError(t, env.Client.Create(ctx, newEnv("commit-order", greeter("app"))))

	// The two watches are separate streams: either event may be read first,
	// so the names are compared once both are in and the order is read from
	// their resource versions (etcd's revisions), not from arrival.
	var committedAt, createdAt uint64
	var committedName, createdName string
	for committedAt == 0 || createdAt == 0 {
		select {
		case ev := <-eeWatch.ResultChan():
			if e, ok := ev.Object.(*petriv1.EphemeralEnvironment); ok && committedAt == 0 && e.Status.TargetNamespace != "" {
				committedAt, committedName = rv(t, e), e.Status.TargetNamespace
				assert.False(t, bound(e), "the first status carrying the name is written before the namespace is bound")
			}
		case ev := <-nsWatch.ResultChan():
			if ns, ok := ev.Object.(*corev1.Namespace); ok && ev.Type == watch.Added && createdAt == 0 {
				createdAt, createdName = rv(t, ns), ns.Name
			}
		case <-ctx.Done():
			require.FailNow(t, "timed out watching the binding")
		}
	}
	assert.Equal(t, committedName, createdName, "the namespace created is the one committed")
	assert.Less(t, committedAt, createdAt, "status.targetNamespace is committed before the namespace is created")
	e := waitFor(t, "commit-order", "bound", bound)
	assert.Equal(t, "commit-order-"+hashPrefix[:4], e.Status.TargetNamespace)

	ns := &corev1.Namespace{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: e.Status.TargetNamespace}, ns))
	assert.Equal(t, string(e.UID), ns.Labels[petriv1.LabelEnvironmentUID])
	assert.Equal(t, string(e.UID), ns.Annotations[petriv1.AnnotationEnvironmentUID])
	assert.Equal(t, mgmtNS+"/commit-order", ns.Annotations[petriv1.AnnotationEnvironment])
}

// Two environments whose names share a 58-character prefix and whose hashes
// share their first characters get distinct namespaces; freeing the shorter
// name later, restarting the operator and changing the spec keep the lock.
func namespaceLockSurvivesCollisionsRestartsAndSpecChanges(t *testing.T) {
	ctx := context.Background()
	prefix := "lock-" + strings.Repeat("x", 53)
	first, second := prefix+"-first", prefix+"-second"
	require.NoError(t, env.Client.Create(ctx, newEnv(first, greeter("app"))))
	a := waitFor(t, first, "bound", bound)
	require.NoError(t, env.Client.Create(ctx, newEnv(second, greeter("app"))))
	b := waitFor(t, second, "bound", bound)

	assert.Equal(t, prefix+"-"+hashPrefix[:4], a.Status.TargetNamespace)
	assert.Equal(t, prefix[:57]+"-"+hashPrefix[:5], b.Status.TargetNamespace, "the first 4 hash characters collide, so the second takes 5 (and one name character fewer)")
	locked := b.Status.TargetNamespace

	// Free the shorter name.
	require.NoError(t, env.Client.Delete(ctx, a))
	waitGone(t, a)
	waitGone(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.Status.TargetNamespace}})

	restartOperator(t)

	// A spec change after the restart re-deploys, in the same namespace.
	b = get(t, second)
	b.Spec.Components = append(b.Spec.Components, greeter("extra"))
	require.NoError(t, env.Client.Update(ctx, b))
	b = waitFor(t, second, "spec change observed", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.ObservedGeneration == e.Generation && e.Generation == 2
	})
	assert.Equal(t, locked, b.Status.TargetNamespace, "never recomputed though a shorter name is free")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: locked}, &corev1.Namespace{}))
}

// A namespace that already has the first candidate's name is skipped, never
// adopted, and outlives the environment.
func TestSquattingNamespaceIsNeverAdoptedNorDeleted(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "squat", succeedAll)
	ctx := context.Background()
	squat := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "squat-" + hashPrefix[:4], Labels: map[string]string{"owner": "someone-else"}}}
	require.NoError(t, env.Client.Create(ctx, squat))
	require.NoError(t, env.Client.Create(ctx, newEnv("squat", greeter("app"))))
	e := waitFor(t, "squat", "bound", bound)
	assert.Equal(t, "squat-"+hashPrefix[:5], e.Status.TargetNamespace)

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(squat), squat))
	assert.True(t, squat.DeletionTimestamp.IsZero(), "the squatting namespace is not deleted")
	assert.Equal(t, map[string]string{"owner": "someone-else", "kubernetes.io/metadata.name": squat.Name}, squat.Labels, "and not adopted")
}

func TestDeployerIdentityIsScopedToTheWorkloadNamespace(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "identity", succeedAll)
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("identity", greeter("app"))))
	e := waitFor(t, "identity", "bound", bound)
	sa := &corev1.ServiceAccount{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: naming.DeployerServiceAccount("identity")}, sa))
	assert.True(t, metav1.IsControlledBy(sa, e))
	rb := &rbacv1.RoleBinding{}
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: e.Status.TargetNamespace, Name: naming.DeployerRoleBinding}, rb) == nil
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, "admin", rb.RoleRef.Name)
	assert.Equal(t, "ClusterRole", rb.RoleRef.Kind)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: mgmtNS, Name: sa.Name}}, rb.Subjects)
}

// Deleting an environment removes its namespace, then the environment and
// its deployer identity.
func TestDeletionRemovesTheNamespaceBeforeTheEnvironment(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "teardown", succeedAll)
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("teardown", greeter("app"))))
	e := waitFor(t, "teardown", "bound", bound)
	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	// The finalizer holds the environment until the namespace is gone, so
	// the namespace is already gone the moment the environment is.
	err := env.Client.Get(ctx, client.ObjectKey{Name: e.Status.TargetNamespace}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "namespace %s must be gone before the environment: %v", e.Status.TargetNamespace, err)
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: naming.DeployerServiceAccount("teardown")}, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "deployer serviceaccount removed: %v", err)
}

// A namespace whose ownership label was tampered with is never deleted; the
// environment says why and keeps its finalizer until force-delete releases it
// without touching the namespace.
func TestTamperedNamespaceStopsDeletionUntilForced(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "tampered", succeedAll)
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("tampered", greeter("app"))))
	e := waitFor(t, "tampered", "bound", bound)
	ns := &corev1.Namespace{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: e.Status.TargetNamespace}, ns))
	ns.Labels[petriv1.LabelEnvironmentUID] = "someone-else"
	require.NoError(t, env.Client.Update(ctx, ns))

	require.NoError(t, env.Client.Delete(ctx, e))
	e = waitFor(t, "tampered", "stalled deletion", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonNamespaceNotOwned)
	})
	assert.Equal(t, petriv1.EnvironmentDeleting, e.Status.Phase)
	assert.Contains(t, e.Finalizers, petriv1.Finalizer)
	msg := findCondition(e, petriv1.ConditionStalled).Message
	assert.Contains(t, msg, e.Status.TargetNamespace)
	assert.Contains(t, msg, petriv1.LabelEnvironmentUID)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ns), ns))
	assert.True(t, ns.DeletionTimestamp.IsZero(), "an unverified namespace is never deleted")

	forceDelete(t, e)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ns), ns))
	assert.True(t, ns.DeletionTimestamp.IsZero(), "force-delete deletes nothing unverified")
}

func TestTTLDeletesTheEnvironment(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "ttl", succeedAll)
	ctx := context.Background()
	e := newEnv("ttl", greeter("app"))
	e.Spec.TTL = &metav1.Duration{Duration: 4 * time.Second}
	require.NoError(t, env.Client.Create(ctx, e))
	bnd := waitFor(t, "ttl", "bound with an expiry", func(e *petriv1.EphemeralEnvironment) bool { return bound(e) && e.Status.ExpiresAt != nil })
	assert.Equal(t, bnd.CreationTimestamp.Add(4*time.Second), bnd.Status.ExpiresAt.Time)
	waitGone(t, e)
	assert.False(t, testClock.Now().Before(bnd.Status.ExpiresAt.Time), "not deleted before it expired")
	var events corev1.EventList
	require.NoError(t, env.Client.List(ctx, &events, client.InNamespace(mgmtNS)))
	found := false
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == bnd.UID && ev.Reason == petriv1.ReasonExpired {
			found = true
		}
	}
	assert.True(t, found, "an Expired event is recorded")
}

// A cycle CEL cannot see is reported as Stalled with the cycle spelled out.
func TestCycleIsStalledWithTheCycleNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("cycle", greeter("a", "c"), greeter("b", "a"), greeter("c", "b"))))
	e := waitFor(t, "cycle", "stalled", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonInvalidSpec)
	})
	assert.Contains(t, findCondition(e, petriv1.ConditionStalled).Message, "dependency cycle a -> c -> b -> a")
	assert.Equal(t, petriv1.EnvironmentStalled, e.Status.Phase)
	assert.Equal(t, e.Generation, e.Status.ObservedGeneration)
	assert.Empty(t, e.Status.TargetNamespace, "nothing is created for an invalid spec")
}

func findCondition(e *petriv1.EphemeralEnvironment, typ string) metav1.Condition {
	for _, c := range e.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// A name committed to status.targetNamespace but taken by someone else before
// the environment could create it is given up while NamespaceBound has never
// been True: the environment reserves the next free name instead of stalling,
// and the namespace it lost is neither adopted nor deleted.
func TestNamespaceTakenBeforeItWasCreatedIsGivenUp(t *testing.T) {
	t.Parallel()
	testNamespaceTakenBeforeCreation(t, "taken", false)
}

// The same race, lost to someone who copies every mark Petri puts on a
// namespace (labels, annotations, the environment's UID): the marks alone
// would have made it the environment's; its ownership proof cannot be
// copied, so it is given up like any other.
func TestNamespaceTakenWithForgedMarksIsGivenUp(t *testing.T) {
	t.Parallel()
	testNamespaceTakenBeforeCreation(t, "forged", true)
}

// forceDelete releases a stuck environment with the force-delete annotation
// and waits until it is gone.
func forceDelete(t *testing.T, e *petriv1.EphemeralEnvironment) {
	t.Helper()
	patch := client.MergeFrom(e.DeepCopy())
	e.Annotations = map[string]string{petriv1.AnnotationForceDelete: "true"}
	require.NoError(t, env.Client.Patch(context.Background(), e, patch))
	waitGone(t, e)
}

// holdNamespace keeps the operator from creating the namespace name until
// the returned release is called: an admission policy refuses it to the
// operator only.
func holdNamespace(t *testing.T, name string) (release func()) {
	t.Helper()
	ctx := context.Background()
	operator := "system:serviceaccount:" + mgmtNS + ":petri-operator"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "petri-test-hold-" + name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("object.metadata.name != %q || request.userInfo.username != %q", name, operator),
				Message:    "held by the test",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	require.NoError(t, env.Client.Create(ctx, policy))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, policy) })
	require.NoError(t, env.Client.Create(ctx, binding))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, binding) })
	cfg, err := env.ServiceAccountConfig(ctx, mgmtNS, "petri-operator")
	require.NoError(t, err)
	asOperator, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	require.True(t, eventually(30*time.Second, func() bool {
		err := asOperator.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "held by the test")
	}), "the admission policy is in force")
	return func() { require.NoError(t, env.Client.Delete(ctx, binding)) }
}

// forgedNamespace is a namespace made by someone other than the operator
// with every mark the operator puts on the environment's own.
func forgedNamespace(name string, e *petriv1.EphemeralEnvironment) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{
			petriv1.LabelManagedBy:      petriv1.ManagedByOperator,
			petriv1.LabelEnvironment:    e.Name,
			petriv1.LabelEnvironmentUID: string(e.UID),
			"owner":                     "someone-else",
		},
		Annotations: map[string]string{
			petriv1.AnnotationEnvironment:            e.Namespace + "/" + e.Name,
			petriv1.AnnotationEnvironmentUID:         string(e.UID),
			petriv1.AnnotationDeployerServiceAccount: naming.DeployerServiceAccount(e.Name),
		},
	}}
}

func testNamespaceTakenBeforeCreation(t *testing.T, name string, forged bool) {
	ctx := context.Background()
	standIn(t, name, succeedAll)
	taken := name + "-" + hashPrefix[:4]
	release := holdNamespace(t, taken)

	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("app"))))
	reserved := waitFor(t, name, "the first candidate committed", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.TargetNamespace == taken
	})
	// Someone else takes the committed name before the environment could
	// create it.
	squat := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: taken, Labels: map[string]string{"owner": "someone-else"}}}
	if forged {
		squat = forgedNamespace(taken, reserved)
	}
	require.NoError(t, env.Client.Create(ctx, squat))
	wantLabels := maps.Clone(squat.Labels)
	wantLabels[corev1.LabelMetadataName] = taken
	release()

	stalled := func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, "")
	}
	e := waitFor(t, name, "bound (or stalled)", func(e *petriv1.EphemeralEnvironment) bool {
		return bound(e) && e.Status.TargetNamespace != taken || stalled(e)
	})
	require.True(t, bound(e), "a name lost before it was bound is given up: %s", describe(e))
	assert.Equal(t, name+"-"+hashPrefix[:5], e.Status.TargetNamespace, "the next free candidate")
	waitFor(t, name, "ready", ready)

	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(squat), squat))
	assert.Equal(t, wantLabels, squat.Labels, "not adopted")
	var rbs rbacv1.RoleBindingList
	require.NoError(t, env.Client.List(ctx, &rbs, client.InNamespace(taken)))
	assert.Empty(t, rbs.Items, "nothing of the environment's was created in it")
	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(squat), squat))
	assert.True(t, squat.DeletionTimestamp.IsZero(), "not deleted")
}

// A bound environment's namespace deleted, and its name taken the moment
// it is free by a namespace that copies every mark and annotation of the
// one deleted, ownership proof included: the proof was made for a nonce
// that is no longer the environment's, so the copy is not adopted: no
// redeploy into it, the environment stalls, and its deletion leaves it.
func TestReplacedNamespaceWithCopiedMarksIsNotAdopted(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "copied", succeedAll)
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, newEnv("copied", greeter("app"))))
	e := waitFor(t, "copied", "ready", ready)
	name := e.Status.TargetNamespace
	old := &corev1.Namespace{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, old))
	require.NotEmpty(t, old.Annotations[petriv1.AnnotationOwnershipProof], "the operator's namespace carries a proof")

	release := holdNamespace(t, name)
	require.NoError(t, env.Client.Delete(ctx, old))
	require.True(t, eventually(60*time.Second, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}))
	}), "the namespace is gone")
	copied := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: maps.Clone(old.Labels), Annotations: maps.Clone(old.Annotations)}}
	require.NoError(t, env.Client.Create(ctx, copied))
	release()

	e = waitFor(t, "copied", "stalled", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonNamespaceNotOwned)
	})
	assert.Contains(t, findCondition(e, petriv1.ConditionStalled).Message, petriv1.AnnotationOwnershipProof)
	assert.False(t, ready(e), "not Ready on a namespace it did not make")
	assert.Equal(t, name, e.Status.TargetNamespace, "the bound name is kept")
	var rbs rbacv1.RoleBindingList
	require.NoError(t, env.Client.List(ctx, &rbs, client.InNamespace(name)))
	assert.Empty(t, rbs.Items, "no deployer RoleBinding in the copy")

	require.NoError(t, env.Client.Delete(ctx, e))
	e = waitFor(t, "copied", "stalled deletion", func(e *petriv1.EphemeralEnvironment) bool {
		return e.DeletionTimestamp != nil && conditionIs(e, petriv1.ConditionStalled, metav1.ConditionTrue, petriv1.ReasonNamespaceNotOwned)
	})
	forceDelete(t, e)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(copied), copied))
	assert.True(t, copied.DeletionTimestamp.IsZero(), "the copy is not deleted")
}
