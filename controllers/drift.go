package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/summary"
)

// Status never lies.
//
// What the operator deployed can disappear behind its back: the workload
// namespace deleted (and created again by the operator under its locked
// name, empty), a Helm release deleted or rolled to another revision, the
// deployer's RoleBinding removed. The operator has no read rights in
// workload namespaces, so it notices each in its own way:
//
//   - the namespace: status.namespaceUID records the UID of the namespace the
//     environment was deployed in; the same name with another UID means
//     everything in it is gone;
//   - the RoleBinding: the operator may read RoleBindings, and looks at the
//     deployer's on every pass in which no Job of the environment runs;
//   - the releases: a verify Job, running as the deployer identity, reads
//     them (verify.go).
//
// Something lost is deployed again: every component (and, for a replaced
// namespace, every binding) goes back to Pending with new Job names
// (status.recoveries goes into them), and WorkloadsIntact is False with
// reason WorkloadsLost, naming what was lost, until the new deploy has an
// outcome. Ready requires WorkloadsIntact once it exists, so the environment
// is not Ready meanwhile.

// workloadRecovery notices a replaced workload namespace, deploys again
// what was lost, and closes the recovery once the deploy has an outcome.
type workloadRecovery struct {
	recorder   events.EventRecorder
	proofs     namespaceProofs
	identities deployerIdentities
}

// recovery hands the steps the reconciler's workload recovery.
func (r *EphemeralEnvironmentReconciler) recovery() workloadRecovery {
	return workloadRecovery{recorder: r.Recorder, proofs: r.proofs(), identities: r.identities()}
}

// notice compares the bound, verified workload namespace with the
// one the environment was deployed in. It records the UID the first time,
// and starts a recovery when the namespace was replaced after Jobs had run
// in it.
//
// The recovery puts every component and binding back to Pending, so the
// deployer identity is ensured (its RoleBinding created in the new
// namespace) before the first new Job, as for a new environment. A Job that
// still runs (an undeploy of a removed component, a deprovision) keeps that
// from happening, so the RoleBinding is then created here.
func (w workloadRecovery) notice(ctx context.Context, env *petriv1.EphemeralEnvironment, ns *corev1.Namespace) error {
	if err := w.proofs.spend(ctx, env, ns); err != nil {
		return err
	}
	uid := string(ns.UID)
	old := env.Status.NamespaceUID
	if uid == "" || old == uid {
		return nil
	}
	env.Status.NamespaceUID = uid
	if old == "" || !anyJobStarted(env) {
		return nil
	}
	w.recover(ctx, env, true, nil, fmt.Sprintf("namespace %s was deleted and created again (uid %s, now %s): its releases and binding Secrets are gone", ns.Name, old, uid))
	if anyJobStarted(env) {
		_, err := w.identities.ensure(ctx, env)
		return err
	}
	return nil
}

// recover deploys again what was lost: the named components (all of
// them when components is nil) and, when the namespace was replaced, every
// binding. Components that left the spec are undeployed as before.
func (w workloadRecovery) recover(ctx context.Context, env *petriv1.EphemeralEnvironment, namespaceLost bool, components []string, why string) {
	env.Status.Recoveries++
	var redeployed []string
	for i := range env.Status.Components {
		cs := &env.Status.Components[i]
		if findComponent(env, cs.Name) == nil || components != nil && !slices.Contains(components, cs.Name) {
			continue
		}
		*cs = petriv1.ComponentStatus{Name: cs.Name, Phase: petriv1.ComponentPending, Generation: env.Generation}
		redeployed = append(redeployed, cs.Name)
	}
	if namespaceLost {
		for i := range env.Status.SharedWorkloads {
			bs := &env.Status.SharedWorkloads[i]
			if !slices.Contains(env.Spec.SharedWorkloads, bs.Name) || bs.Phase == petriv1.ComponentUndeploying || bs.Phase == petriv1.ComponentUndeployed {
				continue
			}
			*bs = petriv1.BindingStatus{Name: bs.Name, Phase: petriv1.ComponentPending, Generation: env.Generation, Recovery: env.Status.Recoveries}
			redeployed = append(redeployed, "binding "+bs.Name)
		}
	}
	msg := why + "; deploying again: " + strings.Join(redeployed, ", ")
	setCondition(env, petriv1.ConditionWorkloadsIntact, metav1.ConditionFalse, petriv1.ReasonWorkloadsLost, msg)
	log.FromContext(ctx).Info("Workloads lost, deploying them again", "why", why, "recovery", env.Status.Recoveries)
	w.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonWorkloadsLost, "Redeploy", "%s", msg)
}

// settled reports whether no Job of the environment's deploy graph or
// bindings is running.
func settled(env *petriv1.EphemeralEnvironment) bool {
	for _, cs := range env.Status.Components {
		if cs.Phase == petriv1.ComponentDeploying || cs.Phase == petriv1.ComponentUndeploying {
			return false
		}
	}
	for _, bs := range env.Status.SharedWorkloads {
		if bs.Phase == petriv1.ComponentDeploying || bs.Phase == petriv1.ComponentUndeploying {
			return false
		}
	}
	return true
}

// checkDeployerAccess makes sure the deployer's RoleBinding is in the
// workload namespace as the operator created it. One that is gone (or bound
// to another role or subject, which Petri never wrote) is created again, with
// an Event, and WorkloadsIntact is False with reason DeployerAccessLost until
// the API server's authorizer honours the new binding and the releases are
// verified. It runs only once the environment's first Jobs have started (the
// identity is ensured before that) and while none of its Jobs runs: the
// passes of a settled environment are few.
func (r *EphemeralEnvironmentReconciler) checkDeployerAccess(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) error {
	if !anyJobStarted(env) || !settled(env) {
		return nil
	}
	ns := env.Status.TargetNamespace
	sa := naming.DeployerServiceAccount(env.Name)
	rb := &rbacv1.RoleBinding{}
	err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.DeployerRoleBinding}, rb)
	var lost string
	switch {
	case apierrors.IsNotFound(err):
		lost = fmt.Sprintf("rolebinding %s in %s was removed", naming.DeployerRoleBinding, ns)
	case err != nil:
		return fmt.Errorf("get rolebinding %s/%s: %w", ns, naming.DeployerRoleBinding, err)
	case rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.Name != objects.AdminClusterRole || len(rb.Subjects) != 1 ||
		rb.Subjects[0].Kind != rbacv1.ServiceAccountKind || rb.Subjects[0].Namespace != env.Namespace || rb.Subjects[0].Name != sa:
		// Not what the operator wrote: it goes, so that no one else holds
		// admin through it, and the operator's own takes its place.
		lost = fmt.Sprintf("rolebinding %s in %s was changed to bind another role or subject", naming.DeployerRoleBinding, ns)
		uid := rb.UID
		err := r.Delete(ctx, rb, client.Preconditions{UID: &uid})
		if apierrors.IsForbidden(err) {
			// The admission fences let the operator delete only the binding
			// it wrote: a person has to remove this one. Looked at again
			// shortly, since no watch tells when it is gone.
			msg := lost + fmt.Sprintf("; the operator may not remove it (%v): delete it, and the operator creates its own", err)
			setCondition(env, petriv1.ConditionWorkloadsIntact, metav1.ConditionFalse, petriv1.ReasonDeployerAccessLost, msg)
			p.stalled(petriv1.ReasonDeployerAccessLost, msg)
			p.requeueAfter(time.Minute)
			return nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete changed rolebinding %s/%s: %w", ns, rb.Name, err)
		}
	}
	if lost != "" {
		if _, err := objects.EnsureAdminBinding(ctx, r.Client, ns, env.Namespace, sa, ownedLabels(env)); err != nil {
			return err
		}
		msg := lost + "; created it again, verifying the releases once it takes effect"
		setCondition(env, petriv1.ConditionWorkloadsIntact, metav1.ConditionFalse, petriv1.ReasonDeployerAccessLost, msg)
		log.FromContext(ctx).Info("Deployer RoleBinding lost, created it again", "namespace", ns)
		r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonDeployerAccessLost, "Bind", "%s", msg)
	}
	c := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionWorkloadsIntact)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != petriv1.ReasonDeployerAccessLost || verifying(env) {
		// A running verify Job is followed by the verify controller.
		return nil
	}
	ok, err := r.identities().authorized(ctx, env)
	if err != nil {
		return err
	}
	if !ok {
		// Asked again after a wait that grows from the loss's finding;
		// past the timeout the environment is Stalled until it is.
		wait, overdue := authorizationWait(r.Options, c.LastTransitionTime.Time)
		if overdue {
			rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: naming.DeployerRoleBinding}}
			p.stalled(petriv1.ReasonDeployerNotAuthorized, notAuthorizedMessage(r.Options, rb))
		}
		p.requeueAfter(wait)
		return nil
	}
	return r.startVerification(ctx, env, p, jobs.VerifyTriggerAccess)
}

// finish closes a recovery once the deploy it started has an outcome
// for the current generation, and keeps WorkloadsIntact's observed generation
// current (Ready requires the condition at the current generation).
func (w workloadRecovery) finish(env *petriv1.EphemeralEnvironment) {
	c := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionWorkloadsIntact)
	if c == nil {
		return
	}
	if c.Status == metav1.ConditionFalse && c.Reason == petriv1.ReasonWorkloadsLost && deployOutcome(env) {
		msg := "deployed again after: " + c.Message
		setCondition(env, petriv1.ConditionWorkloadsIntact, metav1.ConditionTrue, petriv1.ReasonWorkloadsRedeployed, msg)
		w.recorder.Eventf(env, nil, corev1.EventTypeNormal, petriv1.ReasonWorkloadsRedeployed, "Redeploy", "%s", msg)
		return
	}
	setCondition(env, c.Type, c.Status, c.Reason, c.Message)
}

// deployOutcome reports whether the namespace, the bindings and the deploy
// graph of the current generation have an outcome that no running Job
// changes any more.
func deployOutcome(env *petriv1.EphemeralEnvironment) bool {
	required := slices.DeleteFunc(requiredConditions(env), func(t string) bool { return t == petriv1.ConditionWorkloadsIntact })
	return summary.Judge(env.Status.Conditions, env.Generation, required).Final()
}
