package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/shared"
)

// teardownSteps undeploy, deprovision and delete what an environment made,
// and release its finalizer: the deletion branch and the removal of what
// left the spec, handed the clients, recorder and parts they use.
type teardownSteps struct {
	client     client.Client
	apiReader  client.Reader
	recorder   events.EventRecorder
	options    Options
	jobs       jobRunner
	proofs     namespaceProofs
	identities deployerIdentities
	// forget drops what the health watch remembers of the environment
	// (by its UID) once it is gone.
	forget func(uid string)
}

// teardowns hands the deletion branch and the removal steps the
// reconciler's parts they need.
func (r *EphemeralEnvironmentReconciler) teardowns() teardownSteps {
	return teardownSteps{
		client: r.Client, apiReader: r.APIReader, recorder: r.Recorder, options: r.Options,
		jobs: r.jobs(), proofs: r.proofs(), identities: r.identities(),
		forget: func(uid string) {
			if r.workloads != nil {
				r.workloads.seen.Forget(uid)
			}
		},
	}
}

// run tears the environment down while the finalizer holds it: undeploy the
// components in reverse dependency order, deprovision every binding, delete
// the verified namespace and wait until it is gone, remove the deployer
// identity, then release the finalizer. Each step is idempotent; a failed step
// returns its error and is retried with backoff.
func (t teardownSteps) run(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(env, petriv1.Finalizer) {
		return reconcile.Result{}, nil
	}
	if env.Annotations[petriv1.AnnotationForceDelete] == "true" {
		return reconcile.Result{}, t.forceDelete(ctx, env)
	}
	steps := []struct {
		name string
		run  func(context.Context, *petriv1.EphemeralEnvironment, *pass) (bool, error)
	}{
		{"undeploy components", t.undeployComponents},
		{"deprovision bindings", t.deprovisionBindings},
		{"delete namespace", t.deleteNamespace},
	}
	for _, s := range steps {
		done, err := s.run(ctx, env, p)
		if err != nil {
			p.teardownProblem = fmt.Sprintf("%s: %v", s.name, err)
			return p.result(), fmt.Errorf("%s: %w", s.name, err)
		}
		if !done {
			return p.result(), nil
		}
	}
	if err := t.deleteClusterObjects(ctx, env); err != nil {
		return reconcile.Result{}, err
	}
	if err := t.identities.delete(ctx, env); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, t.releaseFinalizer(ctx, env)
}

// deleteClusterObjects deletes, in a workload cluster, the environment's
// Jobs (with their pods) and Secrets in Petri's namespace there. In the
// management cluster the garbage collector does it after the finalizer
// goes, by their owner references; in a workload cluster they have none
// (the environment is not there), only its UID label.
func (t teardownSteps) deleteClusterObjects(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	return shared.DeleteRemote(ctx, t.client, env.Namespace, client.MatchingLabels{petriv1.LabelEnvironmentUID: string(env.UID)})
}

func (t teardownSteps) releaseFinalizer(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	if err := objects.SetFinalizer(ctx, t.client, env, false); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release finalizer: %w", err)
	}
	t.forget(string(env.UID))
	log.FromContext(ctx).Info("Teardown complete, finalizer released")
	return nil
}

// deleteNamespace deletes the namespace named in status.targetNamespace, and
// only after verifying it carries the environment's ownership marks. It is
// done when the namespace no longer exists; the namespace watch wakes the
// reconciler when it goes.
func (t teardownSteps) deleteNamespace(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass) (bool, error) {
	name := env.Status.TargetNamespace
	if name == "" {
		return true, nil
	}
	ns := &corev1.Namespace{}
	if err := t.apiReader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("get namespace %s: %w", name, err)
	}
	why, err := t.proofs.check(ctx, ns, env)
	if err != nil {
		return false, err
	}
	if why != "" {
		msg := fmt.Sprintf("namespace %s is not provably this environment's (%s); it is not deleted. Fix its marks, or set the annotation %s: \"true\" to release the environment without touching it", name, why, petriv1.AnnotationForceDelete)
		p.stalled(petriv1.ReasonNamespaceNotOwned, msg)
		return false, nil
	}
	if ns.DeletionTimestamp.IsZero() {
		uid := ns.UID
		if err := t.client.Delete(ctx, ns, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("delete namespace %s: %w", name, err)
		}
		log.FromContext(ctx).Info("Deleting workload namespace", "namespace", name)
	}
	return false, nil
}

// forceDelete releases the finalizer of a stuck environment. It deletes only
// what is provably the environment's (the verified namespace, the deployer
// ServiceAccount it controls) and does not wait for anything.
func (t teardownSteps) forceDelete(ctx context.Context, env *petriv1.EphemeralEnvironment) error {
	logger := log.FromContext(ctx)
	if name := env.Status.TargetNamespace; name != "" {
		ns := &corev1.Namespace{}
		err := t.apiReader.Get(ctx, client.ObjectKey{Name: name}, ns)
		var why string
		if err == nil {
			var checkErr error
			if why, checkErr = t.proofs.check(ctx, ns, env); checkErr != nil {
				why = "its ownership could not be checked: " + checkErr.Error()
			}
		}
		switch {
		case err == nil && why == "" && ns.DeletionTimestamp.IsZero():
			uid := ns.UID
			if err := t.client.Delete(ctx, ns, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
				logger.Info("Force delete: namespace deletion failed, leaving it", "namespace", name, "error", err.Error())
			}
		case err == nil && why != "":
			logger.Info("Force delete: namespace is not provably ours, leaving it", "namespace", name, "why", why)
		}
	}
	if err := t.identities.delete(ctx, env); err != nil {
		return err
	}
	t.recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonForceDeleted, "Delete", "%s annotation released the finalizer; only provably owned objects were deleted", petriv1.AnnotationForceDelete)
	return t.releaseFinalizer(ctx, env)
}
