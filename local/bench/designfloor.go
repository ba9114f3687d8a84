package bench

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// designWrites are the writes the operator makes for an environment beyond
// its objects, Jobs and final status, which the design requires: the
// finalizer before anything is made, the namespace's name committed to
// status before the namespace is created (the lock), the
// SubjectAccessReview that the deployer's rights took effect before its
// first Job, a status write at each step of the graph, and an Event when
// the namespace is bound and one when the environment is Ready. The scale
// floor issues them too, so that the operator ÷ floor ratio is the
// operator's own cost: its cache, its passes, their order and latency.
type designWrites struct {
	on     bool
	c      client.Client
	ee     *petriv1.EphemeralEnvironment
	writes *int
}

// begin: the finalizer, then the reservation of the namespace's name.
func (d designWrites) begin(ctx context.Context, ns string) error {
	if !d.on {
		return nil
	}
	base := d.ee.DeepCopy()
	d.ee.Finalizers = append(d.ee.Finalizers, petriv1.Finalizer)
	*d.writes++
	if err := d.c.Patch(ctx, d.ee, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("finalizer of %s: %w", d.ee.Name, err)
	}
	return d.status(ctx, func(e *petriv1.EphemeralEnvironment) {
		e.Status.TargetNamespace = ns
		apimeta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionNamespaceBound, Status: metav1.ConditionFalse, Reason: petriv1.ReasonNamespaceReserved, Message: "namespace " + ns + " reserved, creating it"})
	})
}

// authorized: the SubjectAccessReview of the deployer's rights in ns, and
// the Event of the namespace bound.
func (d designWrites) authorized(ctx context.Context, ns, sa string) error {
	if !d.on {
		return nil
	}
	*d.writes++
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + floorNamespace + ":" + sa,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "secrets"},
	}}
	if err := d.c.Create(ctx, sar); err != nil {
		return fmt.Errorf("subjectaccessreview for %s: %w", d.ee.Name, err)
	}
	return d.event(ctx, petriv1.ConditionNamespaceBound)
}

// step is the status write of a step of the graph.
func (d designWrites) step(ctx context.Context, msg string) error {
	if !d.on {
		return nil
	}
	return d.status(ctx, func(e *petriv1.EphemeralEnvironment) {
		apimeta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionComponentsDeployed, Status: metav1.ConditionFalse, Reason: petriv1.ReasonDeployProgressing, Message: msg})
	})
}

func (d designWrites) status(ctx context.Context, change func(*petriv1.EphemeralEnvironment)) error {
	base := d.ee.DeepCopy()
	change(d.ee)
	*d.writes++
	if err := d.c.Status().Patch(ctx, d.ee, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("status of %s: %w", d.ee.Name, err)
	}
	return nil
}

// event records an Event about the environment, as the operator's
// recorder does for a transition.
func (d designWrites) event(ctx context.Context, reason string) error {
	if !d.on {
		return nil
	}
	*d.writes++
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: floorNamespace, GenerateName: d.ee.Name + "."},
		InvolvedObject: corev1.ObjectReference{APIVersion: petriv1.GroupVersion.String(), Kind: "EphemeralEnvironment", Namespace: floorNamespace, Name: d.ee.Name, UID: d.ee.UID},
		Reason:         reason, Message: reason + " (floor)", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "petri-bench-floor"},
	}
	if err := d.c.Create(ctx, ev); err != nil {
		return fmt.Errorf("event of %s: %w", d.ee.Name, err)
	}
	return nil
}
