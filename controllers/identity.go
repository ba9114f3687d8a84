package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/route"
)

// indexDeployerServiceAccount indexes environments by the name of their
// deployer ServiceAccount.
const indexDeployerServiceAccount = "deployerServiceAccount"

// deployerIdentities makes, restores, checks and deletes the deployer
// ServiceAccounts whose rights the environments' Jobs run with.
type deployerIdentities struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
}

// identities hands the steps the reconciler's deployer identities.
func (r *EphemeralEnvironmentReconciler) identities() deployerIdentities {
	return deployerIdentities{client: r.Client, apiReader: r.APIReader, recorder: r.Recorder}
}

// ensure creates the environment's deployer ServiceAccount in
// the management namespace and, in the workload namespace, the one object the
// operator ever writes there: a RoleBinding to the admin ClusterRole.
//
// The ServiceAccount carries the environment's ownership marks (controller
// reference, labels and annotations with its UID). One that exists under the
// name without them (made by someone else, or by another environment whose
// name maps to the same identity) is never adopted: binding it to admin
// would hand the workload namespace to whoever controls it. That is an
// identityNotOwnedError, which stalls the environment until it is gone.
func (d deployerIdentities) ensure(ctx context.Context, env *petriv1.EphemeralEnvironment) (*rbacv1.RoleBinding, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
		Namespace:   env.Namespace,
		Name:        naming.DeployerServiceAccount(env.Name),
		Labels:      ownedLabels(env),
		Annotations: ownerAnnotations(env),
	}}
	if err := controllerutil.SetControllerReference(env, sa, d.client.Scheme()); err != nil {
		return nil, err
	}
	err := d.client.Create(ctx, sa)
	if apierrors.IsAlreadyExists(err) {
		existing := &corev1.ServiceAccount{}
		if err := d.apiReader.Get(ctx, client.ObjectKeyFromObject(sa), existing); err != nil {
			return nil, fmt.Errorf("get deployer serviceaccount %s: %w", sa.Name, err)
		}
		if why := identityOwnershipProblem(ctx, existing, env); why != "" {
			return nil, &identityNotOwnedError{msg: fmt.Sprintf("serviceaccount %s/%s exists but is not this environment's (%s); Petri never adopts it. Delete or rename it, and the environment creates its own", sa.Namespace, sa.Name, why)}
		}
	} else if err != nil {
		return nil, fmt.Errorf("create deployer serviceaccount %s: %w", sa.Name, err)
	}
	return objects.EnsureAdminBinding(ctx, d.client, env.Status.TargetNamespace, sa.Namespace, sa.Name, ownedLabels(env))
}

// restore makes the deployer ServiceAccount again when it
// was deleted after the environment's first Job: without it every later
// pod of the environment is refused, each Job waits out its deadline and
// the teardown never ends. The ServiceAccount watch brings the environment
// here as soon as it goes; the cache says whether it is there.
func (d deployerIdentities) restore(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	sa := &corev1.ServiceAccount{}
	err := d.client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: naming.DeployerServiceAccount(env.Name)}, sa)
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	if _, err := d.ensure(ctx, env); err != nil {
		return fmt.Errorf("deployer serviceaccount was deleted; create it again: %w", err)
	}
	log.FromContext(ctx).Info("Deployer ServiceAccount was deleted, created it again", "serviceAccount", sa.Name)
	d.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployerAccessLost, "Bind", "deployer serviceaccount %s/%s was deleted; created it again", env.Namespace, naming.DeployerServiceAccount(env.Name))
	return nil
}

// identityNotOwnedError is a deployer ServiceAccount name held by a
// ServiceAccount that is not provably the environment's.
type identityNotOwnedError struct{ msg string }

func (e *identityNotOwnedError) Error() string { return e.msg }

// identityOwnershipProblem returns why sa is not provably the environment's
// deployer identity, or "". The environment's controller reference (which
// names its UID) and its UID label both prove it; a ServiceAccount made by an
// operator before the annotations existed carries both as well.
func identityOwnershipProblem(ctx context.Context, sa *corev1.ServiceAccount, env *petriv1.EphemeralEnvironment) string {
	var problems []string
	if !route.ControlledBy(ctx, sa, env) {
		problems = append(problems, "not controlled by the environment")
	}
	if got := sa.Labels[petriv1.LabelEnvironmentUID]; got != string(env.UID) {
		problems = append(problems, fmt.Sprintf("label %s=%q", petriv1.LabelEnvironmentUID, got))
	}
	return strings.Join(problems, ", ")
}

// authorized asks the API server's authorizer whether the deployer
// identity already holds its rights in the workload namespace. A new
// RoleBinding takes effect once the authorizer's own watch has seen it; a Job
// started before that would be refused.
func (d deployerIdentities) authorized(ctx context.Context, env *petriv1.EphemeralEnvironment) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   serviceaccount.MakeUsername(env.Namespace, naming.DeployerServiceAccount(env.Name)),
		Groups: serviceaccount.MakeGroupNames(env.Namespace),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: env.Status.TargetNamespace, Verb: "create", Resource: "secrets",
		},
	}}
	if err := d.client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("review the deployer's access: %w", err)
	}
	return sar.Status.Allowed, nil
}

// authorizationPollMax bounds the wait between two questions to the
// authorizer about a deployer's rights.
const authorizationPollMax = 30 * time.Second

// authorizationWait says, for a deployer RoleBinding made at since and not
// honoured yet, when to ask the authorizer again and whether the wait is
// overdue (--deployer-authorization-timeout passed). The wait grows with
// the time already waited (half of it, from 200 ms to at most 30 s, or a
// quarter of the timeout when that is less): a binding the authorizer
// honours within a moment is seen at once, one it never honours costs a
// question every 30 s rather than five API calls every 200 ms.
func authorizationWait(o Options, since time.Time) (time.Duration, bool) {
	waited := max(o.Now().Sub(since), 0)
	limit := max(min(authorizationPollMax, o.DeployerAuthorizationTimeout/4), 200*time.Millisecond)
	return min(max(waited/2, 200*time.Millisecond), limit), waited >= o.DeployerAuthorizationTimeout
}

// notAuthorizedMessage says what a Stalled DeployerNotAuthorized means and
// what a person can do. It does not change from one check to the next, so a
// stalled environment costs no status write per check.
func notAuthorizedMessage(o Options, rb *rbacv1.RoleBinding) string {
	poll, _ := authorizationWait(o, time.Time{})
	return fmt.Sprintf("the API server's authorizer has not honoured rolebinding %s/%s (ClusterRole %s) within %s: the deployer may not create Secrets there, so no Job starts; check the %s ClusterRole (its aggregated rules) and any authorization webhook. Checked again every %s",
		rb.Namespace, rb.Name, objects.AdminClusterRole, o.DeployerAuthorizationTimeout, objects.AdminClusterRole, poll)
}

// ownerAnnotations name the environment an object belongs to, as on its
// workload namespace.
func ownerAnnotations(env *petriv1.EphemeralEnvironment) map[string]string {
	return map[string]string{
		petriv1.AnnotationEnvironment:    env.Namespace + "/" + env.Name,
		petriv1.AnnotationEnvironmentUID: string(env.UID),
	}
}

// ownedLabels mark objects the operator created for an environment.
func ownedLabels(env *petriv1.EphemeralEnvironment) map[string]string {
	return map[string]string{
		petriv1.LabelManagedBy:      petriv1.ManagedByOperator,
		petriv1.LabelEnvironment:    naming.LabelValue(env.Name),
		petriv1.LabelEnvironmentUID: string(env.UID),
	}
}

// delete removes the deployer ServiceAccount once the
// workload namespace (and with it the RoleBinding) is gone.
func (d deployerIdentities) delete(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	sa := &corev1.ServiceAccount{}
	err := d.client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: naming.DeployerServiceAccount(env.Name)}, sa)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get deployer serviceaccount: %w", err)
	}
	if !route.ControlledBy(ctx, sa, env) {
		return nil
	}
	uid := sa.UID
	if err := d.client.Delete(ctx, sa, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete deployer serviceaccount %s: %w", sa.Name, err)
	}
	return nil
}
