// Package workloadcluster holds the WorkloadCluster controller: it connects
// to each registered workload cluster with the credentials of its Secret,
// probes it, and writes what it found and how much is placed there to the
// WorkloadCluster's status, the only writer of that status.
package workloadcluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/kubeconfig"
	"github.com/petri-dev/petri/controllers/internal/options"
)

// +kubebuilder:rbac:groups=petri.dev,namespace=petri-system,resources=workloadclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=petri.dev,namespace=petri-system,resources=workloadclusters/status,verbs=get;update;patch

// Reconciler connects to each registered workload cluster with the
// credentials of its Secret, probes it every ProbeInterval, and writes what
// it found and how much is placed there to its status.
type Reconciler struct {
	client.Client
	// APIReader reads the credentials' Secret: it is the installer's, not
	// labelled as the operator's, so not in the cache.
	APIReader client.Reader
	// Clusters are the connections it keeps.
	Clusters *clusters.Registry
	// Options are the operator's settings: its namespace, whether it runs
	// without fences, how often it probes, its clock.
	Options options.Options
}

// Reconcile connects to, probes and counts one workload cluster.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	wc := &petriv1.WorkloadCluster{}
	if err := r.Get(ctx, req.NamespacedName, wc); err != nil {
		if apierrors.IsNotFound(err) {
			r.Clusters.Disconnect(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !r.Clusters.Started() {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	base := wc.DeepCopy()
	reachable, reason, msg := r.connectAndProbe(ctx, wc)
	status := metav1.ConditionFalse
	if reachable {
		status = metav1.ConditionTrue
	}
	apimeta.SetStatusCondition(&wc.Status.Conditions, metav1.Condition{
		Type: petriv1.ConditionReachable, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: wc.Generation, LastTransitionTime: r.Options.MetaNow(),
	})
	load, err := clusters.PlacedIn(ctx, r.Client, wc.Namespace, wc.Name)
	if err != nil {
		return reconcile.Result{}, err
	}
	wc.Status.Environments = int32(load.Environments)
	wc.Status.RequestedCPU, wc.Status.RequestedMemory = nonZero(load.CPU), nonZero(load.Memory)
	wc.Status.ObservedGeneration = wc.Generation
	if !equality.Semantic.DeepEqual(base.Status, wc.Status) {
		if err := r.Status().Patch(ctx, wc, client.MergeFrom(base)); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("patch workload cluster status: %w", err)
		}
	}
	if was := apimeta.FindStatusCondition(base.Status.Conditions, petriv1.ConditionReachable); was == nil || was.Status != status {
		log.FromContext(ctx).Info("Workload cluster probed", "reachable", reachable, "reason", reason, "message", msg)
	}
	return reconcile.Result{RequeueAfter: r.Options.ProbeInterval()}, nil
}

// connectAndProbe reads the cluster's credentials, refuses a kubeconfig that
// is not only inline credentials before connecting, (re)connects when they
// changed, and probes it. Nothing of the Secret's content goes into a
// message.
func (r *Reconciler) connectAndProbe(ctx context.Context, wc *petriv1.WorkloadCluster) (bool, string, string) {
	key := wc.Spec.Credentials.Key
	if key == "" {
		key = petriv1.DefaultClusterCredentialsKey
	}
	ref := fmt.Sprintf("Secret %s/%s", wc.Namespace, wc.Spec.Credentials.Name)
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: wc.Namespace, Name: wc.Spec.Credentials.Name}, secret); err != nil {
		r.Clusters.Disconnect(wc.Name)
		if apierrors.IsNotFound(err) {
			return false, petriv1.ReasonCredentialsMissing, ref + " not found"
		}
		return false, petriv1.ReasonCredentialsMissing, fmt.Sprintf("read %s: %v", ref, err)
	}
	data, ok := secret.Data[key]
	if !ok {
		r.Clusters.Disconnect(wc.Name)
		return false, petriv1.ReasonCredentialsMissing, fmt.Sprintf("%s has no key %s", ref, key)
	}
	cfg, err := kubeconfig.RESTConfig(data)
	if err != nil {
		r.Clusters.Disconnect(wc.Name)
		var unsafe *kubeconfig.UnsafeError
		if errors.As(err, &unsafe) {
			return false, petriv1.ReasonCredentialsUnsafe, fmt.Sprintf("%s key %s: %v", ref, key, err)
		}
		return false, petriv1.ReasonCredentialsInvalid, fmt.Sprintf("%s key %s: %v", ref, key, err)
	}
	conn, err := r.Clusters.Connect(wc.Name, string(secret.UID)+"/"+secret.ResourceVersion+"/"+key, cfg)
	if err != nil {
		return false, petriv1.ReasonClusterUnreachable, err.Error()
	}
	first := !conn.WasProbed()
	reachable, reason, message := probe(ctx, conn, r.Options)
	if first {
		r.Clusters.ProbedFirst(wc.Name)
	}
	return reachable, reason, message
}

func nonZero(q resource.Quantity) *resource.Quantity {
	if q.IsZero() {
		return nil
	}
	return &q
}

// SetupWithManager watches WorkloadClusters, and the environments placed
// in them (their count is the cluster's status).
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&petriv1.WorkloadCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&petriv1.EphemeralEnvironment{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			env := obj.(*petriv1.EphemeralEnvironment)
			if env.Status.Cluster == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: env.Namespace, Name: env.Status.Cluster}}}
		}), builder.WithPredicates(placementChanged)).
		Named("workloadcluster").
		Complete(r)
}

// placementChanged lets through the environment events that change a
// cluster's count: placed, deleted.
var placementChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*petriv1.EphemeralEnvironment), e.ObjectNew.(*petriv1.EphemeralEnvironment)
		return o.Status.Cluster != n.Status.Cluster
	},
}
