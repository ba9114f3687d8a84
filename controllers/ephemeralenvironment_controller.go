// Package controllers holds Petri's reconcilers. The operator is
// source-agnostic: it never reads a git repository and holds no git or GitHub
// credentials; everything it deploys is resolved in the spec it is given.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/releasebusy"
	"github.com/petri-dev/petri/controllers/internal/shared"
	"github.com/petri-dev/petri/internal/cacheguard"
)

// EphemeralEnvironmentReconciler binds each environment to a workload
// namespace, deploys its components through Jobs and tears it down in order.
type EphemeralEnvironmentReconciler struct {
	client.Client
	// APIReader reads from the API server directly, for decisions that must
	// not rest on a label-filtered cache (namespace ownership).
	APIReader client.Reader
	// NamespaceCache reads the namespaces the operator created (its
	// label-selected cache); a bound namespace found there, owned and not
	// terminating, needs no request. Nil reads the API server every time.
	NamespaceCache client.Reader
	Recorder       events.EventRecorder
	Options        Options

	// ownership holds the key of the namespaces' ownership proofs.
	ownership ownershipKey
	// written remembers the resourceVersion of each environment's last
	// write by this operator.
	written cacheguard.Writes[types.NamespacedName]
	// releaseJobs remembers the last Job it created of each release.
	releaseJobs releasebusy.Created
	// locks serialises its passes with the sleep and verify controllers'.
	locks envLocks
	// clusters are the connections to the workload clusters; nil without
	// them (--workload-clusters=false).
	clusters *clusters.Registry
	// placements serialises placement decisions.
	placements placements
	// watchers are the controllers that hear a workload cluster's events
	// once it is connected.
	watchers []clusterWatcher
	// workloads is the health watch (health.go); nil with
	// --workload-health=false.
	workloads *workloadWatch
}

// +kubebuilder:rbac:groups=petri.dev,namespace=petri-system,resources=ephemeralenvironments,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=petri.dev,namespace=petri-system,resources=ephemeralenvironments/status;ephemeralenvironments/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=batch,namespace=petri-system,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",namespace=petri-system,resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=petri-system,resources=serviceaccounts;secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=petri-system,resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io;"",namespace=petri-system,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=petri-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;create;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=admin

// Reconcile moves one environment one step towards its spec: get it, wait
// for the cache to show this operator's own last write, then tear it down
// or run the normal path's phases over a scope whose close writes the status
// once.
func (r *EphemeralEnvironmentReconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, retErr error) {
	unlock := r.locks.lock(req.NamespacedName)
	defer unlock()
	env := &petriv1.EphemeralEnvironment{}
	if err := r.Get(ctx, req.NamespacedName, env); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Forget(req.NamespacedName)
			r.releaseJobs.Forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.Stale(req.NamespacedName, env.ResourceVersion) {
		// The cache has not caught up with this operator's own last write:
		// acting on the older object would repeat what that write recorded
		// (start a Job again under a name already used). The write's watch
		// event brings the environment back (this controller hears every
		// change of it; a relisting informer delivers it as an update too),
		// so nothing is requeued: a requeue was one more pass after the one
		// the event brings.
		log.FromContext(ctx).V(1).Info("Cache is behind the last status written, waiting for it", "resourceVersion", env.ResourceVersion)
		return reconcile.Result{}, nil
	}
	ctx, why, pending := r.forCluster(ctx, env)
	if pending {
		// The operator has not heard from the cluster since it started:
		// nothing is said of it yet. Its first probe wakes the pass.
		log.FromContext(ctx).V(1).Info("Waiting for the workload cluster's first probe", "cluster", env.Status.Cluster)
		return reconcile.Result{RequeueAfter: clusters.PendingPoll}, nil
	}
	s := newScope(r, req.NamespacedName, env)
	defer func() { retErr = s.close(ctx, retErr) }()
	r.placements.seen(env)
	if why != "" {
		return r.clusterAway(ctx, env, s.pass, why)
	}
	clusterPlaced(env)
	if !env.DeletionTimestamp.IsZero() {
		return r.teardowns().run(ctx, env, s.pass)
	}
	return s.run(ctx, r.normalPath())
}

// clusterAwayPoll is how soon an environment whose workload cluster does
// not answer is looked at again, besides the WorkloadCluster's own change.
const clusterAwayPoll = 30 * time.Second

// clusterAway is a pass over an environment whose workload cluster does not
// answer: nothing is changed there, nor deleted for it. The environment says
// so (ClusterPlaced False, ClusterUnreachable, naming the cluster); its
// teardown waits, and the force-delete annotation ends it without touching
// that cluster.
func (r *EphemeralEnvironmentReconciler) clusterAway(ctx context.Context, env *petriv1.EphemeralEnvironment, p *pass, why string) (reconcile.Result, error) {
	setCondition(env, petriv1.ConditionClusterPlaced, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable, why)
	if env.DeletionTimestamp.IsZero() {
		p.requeueAfter(clusterAwayPoll)
		return p.result(), nil
	}
	if !controllerutil.ContainsFinalizer(env, petriv1.Finalizer) {
		return reconcile.Result{}, nil
	}
	if env.Annotations[petriv1.AnnotationForceDelete] == "true" {
		log.FromContext(ctx).Info("Force delete: workload cluster does not answer, nothing there is touched", "cluster", env.Status.Cluster)
		r.Recorder.Eventf(env, nil, corev1.EventTypeWarning, petriv1.ReasonForceDeleted, "Delete", "%s annotation released the finalizer; workload cluster %s did not answer, and nothing in it was deleted (namespace %s stays there)", petriv1.AnnotationForceDelete, env.Status.Cluster, env.Status.TargetNamespace)
		return reconcile.Result{}, r.teardowns().releaseFinalizer(ctx, env)
	}
	p.stalled(petriv1.ReasonClusterUnreachable, why+fmt.Sprintf("; teardown waits for it. Set the annotation %s: \"true\" to release the environment without touching that cluster", petriv1.AnnotationForceDelete))
	p.requeueAfter(clusterAwayPoll)
	return p.result(), nil
}

// staleCachePoll is how soon an environment whose cached copy is older than
// this operator's last write is looked at again, should its watch event be
// lost.
const staleCachePoll = 250 * time.Millisecond

// normalPath is the order of the phases of an environment that is not being
// deleted. Each one acts on the scope and says whether the path goes on.
func (r *EphemeralEnvironmentReconciler) normalPath() []phase {
	return []phase{
		{"ensure finalizer", ensureFinalizer},
		{"expire", expire},
		{"validate spec", validateSpec},
		{"bind namespace", waiting(r.namespaces().bind)},
		{"deployer identity", deployerIdentity},
		{"bind shared workloads", waiting(r.bindings().bind)},
		{"honour redeploy", redeployPhase},
		{"wait for sleep or wake", sleepFirst},
		{"deploy", waiting(r.graph().deploy)},
		{"finish recovery", finishRecoveryPhase},
		{"record the deploy's start", sleepLast},
	}
}

func ensureFinalizer(ctx context.Context, s *scope) (step, error) {
	env := s.env
	if controllerutil.ContainsFinalizer(env, petriv1.Finalizer) {
		return proceed, nil
	}
	if err := objects.SetFinalizer(ctx, s.Client, env, true); err != nil {
		return haltWith(reconcile.Result{}), fmt.Errorf("add finalizer: %w", err)
	}
	return proceed, nil
}

// expire deletes an environment whose spec.ttl passed, and otherwise asks
// to be woken when it does.
func expire(ctx context.Context, s *scope) (step, error) {
	env := s.env
	expired, after := s.expiry(env)
	if !expired {
		s.pass.requeueAfter(after)
		return proceed, nil
	}
	log.FromContext(ctx).Info("TTL passed, deleting the environment", "expiresAt", env.Status.ExpiresAt)
	s.Recorder.Eventf(env, nil, corev1.EventTypeNormal, petriv1.ReasonExpired, "Delete", "spec.ttl passed at %s", env.Status.ExpiresAt.UTC().Format(time.RFC3339))
	if err := s.Delete(ctx, env, client.Preconditions{UID: &env.UID}); err != nil && !apierrors.IsNotFound(err) {
		return haltWith(reconcile.Result{}), fmt.Errorf("delete expired environment: %w", err)
	}
	return haltWith(reconcile.Result{}), nil
}

// validateSpec stalls an environment whose spec no pass can deploy.
func validateSpec(ctx context.Context, s *scope) (step, error) {
	if err := s.validate(ctx, s.env); err != nil {
		s.pass.stalled(petriv1.ReasonInvalidSpec, err.Error())
		return haltWith(reconcile.Result{}), reconcile.TerminalError(err)
	}
	return proceed, nil
}

// deployerIdentity ensures the deployer identity, and confirms its rights,
// until the first Job of a generation starts; later passes need no API calls
// for it, and check only that its RoleBinding is still there.
func deployerIdentity(ctx context.Context, s *scope) (step, error) {
	env, p := s.env, s.pass
	if anyJobStarted(env) {
		if err := s.identities().restore(ctx, env); err != nil {
			return halt, err
		}
		err := s.checkDeployerAccess(ctx, env, p)
		return step{stop: p.stop}, err
	}
	rb, err := s.identities().ensure(ctx, env)
	if err != nil {
		var foreign *identityNotOwnedError
		if errors.As(err, &foreign) {
			// Needs a person; the ServiceAccount watch brings the
			// environment back once the foreign one is gone.
			p.stalled(petriv1.ReasonDeployerIdentityNotOwned, foreign.msg)
			return halt, nil
		}
		return halt, err
	}
	ok, err := s.identities().authorized(ctx, env)
	if err != nil || ok {
		return step{stop: err != nil}, err
	}
	// Checked only until the first Job starts; no watch tells when the
	// authorizer honours the binding, so it is asked again after a wait
	// that grows with the time waited.
	wait, overdue := authorizationWait(s.Options, rb.CreationTimestamp.Time)
	if overdue {
		p.stalled(petriv1.ReasonDeployerNotAuthorized, notAuthorizedMessage(s.Options, rb))
		return haltWith(reconcile.Result{RequeueAfter: wait}), nil
	}
	setCondition(env, petriv1.ConditionComponentsDeployed, metav1.ConditionFalse, petriv1.ReasonDeployProgressing, "waiting for the deployer's RoleBinding to take effect")
	return haltWith(reconcile.Result{RequeueAfter: wait}), nil
}

func redeployPhase(ctx context.Context, s *scope) (step, error) {
	honourRedeploy(ctx, s.Recorder, s.env)
	return proceed, nil
}

// sleepFirst keeps the deploy graph from running while the sleep
// controller's status.sleep holds it, and finds whether the current
// generation's deploy had started before this pass.
func sleepFirst(_ context.Context, s *scope) (step, error) {
	s.deployStartedBefore = trackDeployStart(s.env, true, s.Options.MicroNow())
	if sleepHolds(s.env) {
		return halt, nil
	}
	return proceed, nil
}

func finishRecoveryPhase(_ context.Context, s *scope) (step, error) {
	s.recovery().finish(s.env)
	return proceed, nil
}

// sleepLast records the start of a deploy the graph just began (a sleep
// request older than it is stale).
func sleepLast(_ context.Context, s *scope) (step, error) {
	trackDeployStart(s.env, s.deployStartedBefore, s.Options.MicroNow())
	return proceed, nil
}

// anyJobStarted reports whether a bind or deploy Job was ever started for the
// environment.
func anyJobStarted(env *petriv1.EphemeralEnvironment) bool {
	for _, c := range env.Status.Components {
		if c.Job != "" {
			return true
		}
	}
	for _, b := range env.Status.SharedWorkloads {
		if b.Job != "" {
			return true
		}
	}
	return false
}

// expiry reports whether spec.ttl has passed, or how long until it does.
func (r *EphemeralEnvironmentReconciler) expiry(env *petriv1.EphemeralEnvironment) (bool, time.Duration) {
	if env.Spec.TTL == nil {
		env.Status.ExpiresAt = nil
		return false, 0
	}
	at := env.CreationTimestamp.Add(env.Spec.TTL.Duration)
	t := metaTime(at)
	env.Status.ExpiresAt = &t
	left := r.Options.Until(at)
	return left <= 0, left
}

// SetupWithManager watches environments, the Jobs and values Secrets they
// own, and the workload namespaces they created (cluster-scoped, so mapped
// back through the ownership annotation rather than an owner reference).
func (r *EphemeralEnvironmentReconciler) SetupWithManager(mgr manager.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&petriv1.EphemeralEnvironment{}).
		Owns(&batchv1.Job{}, builder.WithPredicates(jobwatch.OutcomeChanged, jobwatch.NotToldByItsPod(mgr.GetClient()))).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.maps().environmentOfPod), builder.WithPredicates(jobwatch.PodSucceededNow)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(namespaceOwner)).
		Watches(&petriv1.SharedWorkload{}, handler.EnqueueRequestsFromMapFunc(r.maps().environmentsUsing), builder.WithPredicates(shared.Changed)).
		Watches(&corev1.ServiceAccount{}, handler.EnqueueRequestsFromMapFunc(r.maps().environmentOfIdentity)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Concurrency}).
		Named("ephemeralenvironment")
	b, err := r.watchWorkloads(mgr, b)
	if err != nil {
		return err
	}
	if r.clusters != nil {
		b = b.Watches(&petriv1.WorkloadCluster{}, handler.EnqueueRequestsFromMapFunc(r.maps().environmentsOfCluster)).
			Watches(&petriv1.EphemeralEnvironment{}, handler.EnqueueRequestsFromMapFunc(r.maps().environmentLeftCluster), builder.WithPredicates(deletedOnly)).
			WatchesRawSource(source.Channel(r.clusters.Probes(r.Options.ManagementNamespace), handler.EnqueueRequestsFromMapFunc(r.maps().environmentsOfCluster)))
	}
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	w, err := newClusterWatcher(c, "ephemeralenvironment", nil)
	if err != nil {
		return err
	}
	r.watchers = append(r.watchers, w)
	return nil
}

// deletedOnly lets through delete events only.
var deletedOnly = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// environmentOfPod maps a Job's pod to the environment that owns the Job.
func (m environmentMaps) environmentOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[batchv1.JobNameLabel]
	if name == "" {
		return nil
	}
	job := &batchv1.Job{}
	if err := m.reader.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, job); err != nil {
		return nil
	}
	if ref := metav1.GetControllerOf(job); ref != nil && ref.Kind == "EphemeralEnvironment" && ref.APIVersion == petriv1.GroupVersion.String() {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: job.Namespace, Name: ref.Name}}}
	}
	return nil
}

// environmentsUsing maps a SharedWorkload to the environments that list it
// (a copy for a workload cluster: those of them placed there),
// so a binding waiting for its shared workload moves when it changes.
func (m environmentMaps) environmentsUsing(ctx context.Context, obj client.Object) []reconcile.Request {
	cluster, name, isCopy := shared.CopyOf(obj.(*petriv1.SharedWorkload))
	if !isCopy {
		name = obj.GetName()
	}
	var list petriv1.EphemeralEnvironmentList
	if err := m.reader.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{shared.UsersIndex: name}); err != nil {
		log.FromContext(ctx).Error(err, "List environments using a shared workload", "sharedWorkload", obj.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, e := range list.Items {
		if !isCopy || e.Status.Cluster == cluster {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: e.Name}})
		}
	}
	return out
}

// environmentOfIdentity maps a ServiceAccount to the environment whose
// deployer identity bears its name, so an environment stalled on a foreign
// ServiceAccount moves once that is gone.
func (m environmentMaps) environmentOfIdentity(ctx context.Context, obj client.Object) []reconcile.Request {
	return m.environmentsIndexed(ctx, obj.GetNamespace(), indexDeployerServiceAccount, obj.GetName())
}

func namespaceOwner(_ context.Context, obj client.Object) []reconcile.Request {
	ns, name, ok := splitKey(obj.GetAnnotations()[petriv1.AnnotationEnvironment])
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}

// envKey is the structured-log key of an environment.
func envKey(env *petriv1.EphemeralEnvironment) klog.ObjectRef { return klog.KObj(env) }
