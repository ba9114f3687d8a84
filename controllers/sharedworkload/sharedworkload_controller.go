// Package sharedworkload holds the SharedWorkload controller: it deploys
// each shared workload once into the shared namespace (and a copy into each
// workload cluster whose environments use it), keeps its generated keys,
// verifies its release and deploys it again when lost, and holds its
// deletion while environments still use it. It is the only writer of a
// SharedWorkload's status.
package sharedworkload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/jobwatch"
	"github.com/petri-dev/petri/controllers/internal/naming"
	"github.com/petri-dev/petri/controllers/internal/objects"
	"github.com/petri-dev/petri/controllers/internal/options"
	"github.com/petri-dev/petri/controllers/internal/retry"
	"github.com/petri-dev/petri/controllers/internal/shared"
	"github.com/petri-dev/petri/controllers/internal/summary"
)

// sharedDeployer is the identity that deploys shared workloads; it holds admin
// in the shared namespace only.
const sharedDeployer = "petri-shared-deployer"

// Reconciler deploys each shared workload once into the shared
// namespace, keeps its generated keys, and holds its deletion while
// environments still use it. The shared namespace is a placement namespace,
// not a tenant or access boundary.
type Reconciler struct {
	client.Client
	APIReader client.Reader
	// NamespaceCache reads the namespaces the operator created (the shared
	// namespace among them) from the manager's cache.
	NamespaceCache client.Reader
	Recorder       events.EventRecorder
	Options        options.Options
	// Clusters are the workload clusters' connections (nil without
	// workload clusters); a copy of a shared workload is reconciled in
	// its cluster (clusters.go).
	Clusters *clusters.Registry
	// clusterEvents is how the controller hears the workload clusters
	// connected later (clusters.Events).
	clusterEvents *clusters.Events
}

// +kubebuilder:rbac:groups=petri.dev,namespace=petri-system,resources=sharedworkloads,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=petri.dev,namespace=petri-system,resources=sharedworkloads/status;sharedworkloads/finalizers,verbs=get;update;patch

// Reconcile moves one shared workload one step towards its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (_ reconcile.Result, retErr error) {
	sw := &petriv1.SharedWorkload{}
	if err := r.Get(ctx, req.NamespacedName, sw); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	before := sw.DeepCopy()
	defer func() {
		if retErr != nil && !errors.Is(retErr, reconcile.TerminalError(nil)) {
			setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonProgressing, "retrying: "+retErr.Error())
		}
		summary.StampTransitions(before.Status.Conditions, sw.Status.Conditions, r.Options.MetaNow())
		if !equality.Semantic.DeepEqual(before.Status, sw.Status) {
			if err := r.Status().Patch(ctx, sw, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
				retErr = errors.Join(retErr, fmt.Errorf("patch status: %w", err))
			}
		}
		for _, c := range sw.Status.Conditions {
			old := apimeta.FindStatusCondition(before.Status.Conditions, c.Type)
			if c.Type != petriv1.ConditionReconciling && (old == nil || old.Status != c.Status || old.Reason != c.Reason) {
				typ := corev1.EventTypeNormal
				if summary.Of(c.Reason) == summary.Error || c.Reason == petriv1.ReasonInUse {
					typ = corev1.EventTypeWarning
				}
				r.Recorder.Eventf(sw, nil, typ, c.Reason, c.Type, "%s", c.Message)
			}
		}
	}()

	cluster, _, isCopy := shared.CopyOf(sw)
	if isCopy {
		sw.Status.Cluster = cluster
		var why string
		var pending bool
		if ctx, why, pending = r.inCluster(ctx, cluster); pending {
			return reconcile.Result{RequeueAfter: clusters.PendingPoll}, nil
		} else if why != "" {
			return r.clusterAway(ctx, sw, why)
		}
	}
	envs, err := r.users(ctx, sw)
	if err != nil {
		return reconcile.Result{}, err
	}
	users := make([]string, 0, len(envs))
	for _, e := range envs {
		users = append(users, e.Name)
	}
	sw.Status.BoundEnvironments = int32(len(users))

	if !sw.DeletionTimestamp.IsZero() {
		return r.teardown(ctx, sw, users)
	}
	if !controllerutil.ContainsFinalizer(sw, petriv1.Finalizer) {
		if err := objects.SetFinalizer(ctx, r.Client, sw, true); err != nil {
			return reconcile.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	if !isCopy {
		if err := r.ensureCopies(ctx, sw, clustersOfUsers(envs)); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.deploy(ctx, sw)
}

// clusterAway is a pass over a copy whose workload cluster does not answer:
// nothing is changed there. It says so; its deletion waits, and the
// force-delete annotation ends it without touching that cluster.
func (r *Reconciler) clusterAway(ctx context.Context, sw *petriv1.SharedWorkload, why string) (reconcile.Result, error) {
	if !sw.DeletionTimestamp.IsZero() && sw.Annotations[petriv1.AnnotationForceDelete] == "true" {
		if !controllerutil.ContainsFinalizer(sw, petriv1.Finalizer) {
			return reconcile.Result{}, nil
		}
		log.FromContext(ctx).Info("Force delete: workload cluster does not answer, nothing there is touched", "cluster", sw.Status.Cluster)
		if err := objects.SetFinalizer(ctx, r.Client, sw, false); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("release finalizer: %w", err)
		}
		return reconcile.Result{}, nil
	}
	setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonClusterUnreachable, why)
	setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonClusterUnreachable, why)
	return reconcile.Result{RequeueAfter: sharedClusterPoll}, nil
}

// prepare makes what a deploy Job of the shared workload needs: the shared
// namespace, the shared deployer identity and the instance keys.
func (r *Reconciler) prepare(ctx context.Context, sw *petriv1.SharedWorkload) (map[string][]byte, error) {
	if err := r.ensureSharedNamespace(ctx, sw); err != nil {
		return nil, err
	}
	if err := r.ensureIdentity(ctx); err != nil {
		return nil, err
	}
	instance, err := shared.EnsureInstanceSecret(ctx, r.Client, r.APIReader, r.Scheme(), sw)
	if err != nil {
		return nil, err
	}
	if sw.Spec.InstanceSecret != nil {
		sw.Status.InstanceSecret = shared.InstanceSecretName(sw)
	}
	return instance, nil
}

// users lists the environments that use the shared workload: that list it,
// or still hold a binding to it that is not deprovisioned yet; for a copy,
// those of them placed in its cluster.
func (r *Reconciler) users(ctx context.Context, sw *petriv1.SharedWorkload) ([]petriv1.EphemeralEnvironment, error) {
	cluster, original, isCopy := shared.CopyOf(sw)
	if !isCopy {
		original = sw.Name
	}
	var list petriv1.EphemeralEnvironmentList
	if err := r.List(ctx, &list, client.InNamespace(sw.Namespace), client.MatchingFields{shared.UsersIndex: original}); err != nil {
		return nil, fmt.Errorf("list environments using %s: %w", original, err)
	}
	out := list.Items[:0]
	for _, e := range list.Items {
		if !isCopy || e.Status.Cluster == cluster {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b petriv1.EphemeralEnvironment) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ensureSharedNamespace creates the shared namespace, or finds it, and
// records which one the release is deployed in. One being deleted is waited
// for: its deletion brings the shared workload back.
func (r *Reconciler) ensureSharedNamespace(ctx context.Context, sw *petriv1.SharedWorkload) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.Options.SharedNamespace, Labels: map[string]string{petriv1.LabelManagedBy: petriv1.ManagedByOperator}}}
	err := r.Create(ctx, objects.WithPodSecurity(ns, r.Options.WorkloadPodSecurity))
	if apierrors.IsAlreadyExists(err) {
		err = r.Get(ctx, client.ObjectKeyFromObject(ns), ns)
	}
	if err != nil {
		return fmt.Errorf("create shared namespace %s: %w", ns.Name, err)
	}
	if !ns.DeletionTimestamp.IsZero() {
		return fmt.Errorf("shared namespace %s is being deleted; deploying once it is gone", ns.Name)
	}
	if err := objects.EnsurePodSecurity(ctx, r.Client, ns, r.Options.WorkloadPodSecurity); err != nil {
		return err
	}
	sw.Status.NamespaceUID = string(ns.UID)
	return nil
}

func (r *Reconciler) ensureIdentity(ctx context.Context) error {
	labels := map[string]string{petriv1.LabelManagedBy: petriv1.ManagedByOperator}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: r.Options.ManagementNamespace, Name: sharedDeployer, Labels: labels}}
	if err := r.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create shared deployer serviceaccount: %w", err)
	}
	_, err := objects.EnsureAdminBinding(ctx, r.Client, r.Options.SharedNamespace, sa.Namespace, sa.Name, labels)
	return err
}

func (r *Reconciler) jobLabels(sw *petriv1.SharedWorkload, action string, gen int64) map[string]string {
	l := map[string]string{
		petriv1.LabelManagedBy:     petriv1.ManagedByOperator,
		shared.LabelSharedWorkload: naming.LabelValue(sw.Name),
		contract.LabelComponent:    naming.LabelValue(sw.Name),
		contract.LabelAction:       action,
		contract.LabelGeneration:   fmt.Sprint(gen),
	}
	if _, _, ok := shared.CopyOf(sw); ok {
		l[shared.LabelUID] = string(sw.UID)
	}
	return l
}

func (r *Reconciler) createJob(ctx context.Context, sw *petriv1.SharedWorkload, name, action string, gen int64, args []string, valuesSecret string) error {
	return objects.CreateJob(ctx, r.Client, r.Options, jobs.Spec{
		Name: name, Labels: r.jobLabels(sw, action, gen), ActiveDeadline: jobs.ReleaseDeadline(sw.Spec.Release),
		Owner:          *metav1.NewControllerRef(sw, petriv1.GroupVersion.WithKind("SharedWorkload")),
		ServiceAccount: sharedDeployer,
		Image:          r.Options.DeployerImage,
		Command:        []string{jobs.DeployerEntrypoint},
		Args:           args,
		ValuesSecret:   valuesSecret,
		CASecret:       r.Options.ChartCASecret,
	})
}

func setSWCondition(sw *petriv1.SharedWorkload, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&sw.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: sw.Generation})
}

// teardown holds the deletion while environments use the shared workload,
// then undeploys its release and releases the finalizer. The instance Secret
// goes with it (owner reference). A failed undeploy is retried with backoff,
// one Job per attempt, and reported; an undeploy Job that is gone before its
// outcome was seen is followed by the next attempt at once.
func (r *Reconciler) teardown(ctx context.Context, sw *petriv1.SharedWorkload, users []string) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(sw, petriv1.Finalizer) {
		return reconcile.Result{}, nil
	}
	sw.Status.Phase = petriv1.EnvironmentDeleting
	forced := sw.Annotations[petriv1.AnnotationForceDelete] == "true"
	if len(users) > 0 && !forced {
		msg := "deletion held: in use by environments " + strings.Join(users, ", ")
		setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonInUse, msg)
		setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonInUse, msg)
		return reconcile.Result{}, nil
	}
	if remaining, err := r.deleteCopies(ctx, sw, forced); err != nil || len(remaining) > 0 {
		if err == nil {
			msg := "deleting its copies in workload clusters first: " + strings.Join(remaining, ", ")
			setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonTeardownProgressing, msg)
			setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonTeardownProgressing, msg)
		}
		return reconcile.Result{}, err
	}
	rel := sw.Status.Release
	if res, waiting, err := r.followUndeploy(ctx, sw, rel, forced); err != nil || waiting {
		return res, err
	}
	if rel != nil && rel.Phase != petriv1.ComponentUndeployed {
		return r.startUndeploy(ctx, sw, rel)
	}
	if err := shared.DeleteRemote(ctx, r.Client, sw.Namespace, client.MatchingLabels{shared.LabelUID: string(sw.UID)}); err != nil {
		return reconcile.Result{}, err
	}
	if err := objects.SetFinalizer(ctx, r.Client, sw, false); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("release finalizer: %w", err)
	}
	return reconcile.Result{}, nil
}

// followUndeploy waits for the release's Job in flight during a teardown:
// a deploy still running finishes first, and an undeploy's outcome is
// recorded (a failure waits its retry). waiting reports that the teardown
// goes no further on this pass.
func (r *Reconciler) followUndeploy(ctx context.Context, sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus, forced bool) (res reconcile.Result, waiting bool, err error) {
	if rel != nil && rel.Phase == petriv1.ComponentDeploying {
		// A deploy still running finishes first: two Helm operations on
		// one release never overlap.
		st, uncached, err := jobwatch.ObserveLive(ctx, r.Client, r.APIReader, r.Options.ManagementNamespace, rel.Job)
		if err != nil {
			return reconcile.Result{}, true, err
		}
		if st.Exists && !st.Done {
			if uncached {
				return reconcile.Result{RequeueAfter: jobwatch.UncachedPoll}, true, nil
			}
			return reconcile.Result{}, true, nil
		}
	}
	if rel != nil && rel.Phase == petriv1.ComponentUndeploying {
		st, uncached, err := jobwatch.ObserveLive(ctx, r.Client, r.APIReader, r.Options.ManagementNamespace, rel.Job)
		if err != nil {
			return reconcile.Result{}, true, err
		}
		switch {
		case st.Exists && !st.Done:
			if uncached {
				return reconcile.Result{RequeueAfter: jobwatch.UncachedPoll}, true, nil
			}
			return reconcile.Result{}, true, nil
		case !st.Exists:
			// Gone before its outcome was seen: the next attempt runs
			// now (an undeploy of an absent release succeeds).
			log.FromContext(ctx).Info("Undeploy job is gone before its outcome was seen, starting the next attempt", "job", rel.Job, "attempt", rel.Attempt)
		case st.Succeeded || forced:
			rel.Phase, rel.FinishedAt = petriv1.ComponentUndeployed, st.Finished
			jobwatch.Record(contract.ActionUndeploy, st)
		default:
			if rel.LastError == "" || rel.FinishedAt == nil {
				rel.LastError, rel.FinishedAt = jobs.OneLine(st.Message), st.Finished
				jobwatch.Record(contract.ActionUndeploy, st)
			}
			if wait := retry.StepIn(r.Options, rel.Attempt, rel.FinishedAt); wait > 0 {
				msg := fmt.Sprintf("undeploy failed (attempt %d): %s; retrying in %s", rel.Attempt, rel.LastError, wait.Round(time.Second))
				setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonTeardownFailed, msg)
				setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonTeardownFailed, msg)
				return reconcile.Result{RequeueAfter: wait}, true, nil
			}
		}
	}
	return reconcile.Result{}, false, nil
}

// startUndeploy starts the release's undeploy Job: the first attempt, or
// the next one after a failure or a lost Job, once the release is free.
func (r *Reconciler) startUndeploy(ctx context.Context, sw *petriv1.SharedWorkload, rel *petriv1.ComponentStatus) (reconcile.Result, error) {
	attempt, gen := rel.Attempt+1, rel.Generation
	if rel.Phase != petriv1.ComponentUndeploying {
		attempt, gen = 1, sw.Generation
	}
	if stale, err := r.staleCopy(ctx, sw); err != nil || stale {
		return reconcile.Result{}, err
	}
	key := jobs.SharedKey(sw, contract.ActionUndeploy, gen)
	key.Attempt = attempt
	name := key.Name()
	args := []string{"undeploy", "--release", shared.ReleaseName(sw), "--namespace", r.Options.SharedNamespace, "--termination-log", jobs.TerminationLogPath}
	wait, err := r.sharedReleaseBusy(ctx, sw, name)
	if err != nil {
		return reconcile.Result{}, err
	} else if wait.Busy() {
		msg := "undeploy " + wait.Waiting()
		setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonTeardownProgressing, msg)
		setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonTeardownProgressing, msg)
		return reconcile.Result{RequeueAfter: jobwatch.UncachedPoll}, nil
	}
	if err := r.createJob(ctx, sw, name, contract.ActionUndeploy, gen, args, ""); err != nil {
		return reconcile.Result{}, err
	}
	now := r.Options.MetaNow()
	lastError := rel.LastError
	rel.Phase, rel.Job, rel.Attempt, rel.Generation, rel.StartedAt, rel.FinishedAt, rel.LastError = petriv1.ComponentUndeploying, name, attempt, gen, &now, nil, ""
	msg := "undeploying"
	if attempt > 1 && lastError != "" {
		msg = fmt.Sprintf("undeploying (attempt %d; attempt %d failed: %s)", attempt, attempt-1, lastError)
	}
	if passed := wait.PassedOver(); passed != "" {
		msg += "; " + passed
		r.Recorder.Eventf(sw, nil, corev1.EventTypeWarning, petriv1.ReasonReleaseHolderLost, "Undeploy", "%s", passed)
	}
	setSWCondition(sw, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonTeardownProgressing, msg)
	setSWCondition(sw, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonTeardownProgressing, msg)
	log.FromContext(ctx).Info("Started shared workload undeploy job", "job", name, "attempt", attempt)
	return reconcile.Result{}, nil
}

// staleCopy reports whether the cache's copy of sw is behind the API
// server's, or sw is gone: a pass that follows the release of the
// finalizer sees the Job it deleted gone, and must not start another
// (in a workload cluster nothing would ever delete it). The next event
// brings the current object.
func (r *Reconciler) staleCopy(ctx context.Context, sw *petriv1.SharedWorkload) (bool, error) {
	fresh := &petriv1.SharedWorkload{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(sw), fresh)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read shared workload %s: %w", sw.Name, err)
	}
	return fresh.ResourceVersion != sw.ResourceVersion, nil
}

// SetupWithManager watches shared workloads, their Jobs, and the environments
// that use them (for the bound count and the deletion hold).
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&petriv1.SharedWorkload{}).
		Owns(&petriv1.SharedWorkload{}).
		Owns(&batchv1.Job{}, builder.WithPredicates(jobwatch.OutcomeChanged)).
		Watches(&petriv1.EphemeralEnvironment{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
			e, ok := obj.(*petriv1.EphemeralEnvironment)
			if !ok {
				return nil
			}
			names := shared.UsedBy(e)
			out := make([]reconcile.Request, 0, 2*len(names))
			for _, name := range names {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: name}})
				if e.Status.Cluster != "" {
					out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: shared.CopyName(name, e.Status.Cluster)}})
				}
			}
			return out
		})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.usersOfSharedNamespace)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.Options.Concurrency/2)}).
		Named("sharedworkload")
	if r.Clusters != nil {
		b = b.Watches(&petriv1.WorkloadCluster{}, handler.EnqueueRequestsFromMapFunc(r.sharedWorkloadsOfCluster)).
			WatchesRawSource(source.Channel(r.Clusters.Probes(r.Options.ManagementNamespace), handler.EnqueueRequestsFromMapFunc(r.sharedWorkloadsOfCluster)))
	}
	c, err := b.Build(r)
	if err != nil {
		return err
	}
	r.clusterEvents = clusters.NewEvents("sharedworkload")
	return c.Watch(r.clusterEvents)
}

// usersOfSharedNamespace wakes every shared workload when the shared
// namespace changes (its deletion above all: the releases in it are gone).
func (r *Reconciler) usersOfSharedNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetName() != r.Options.SharedNamespace {
		return nil
	}
	var list petriv1.SharedWorkloadList
	if err := r.List(ctx, &list, client.InNamespace(r.Options.ManagementNamespace)); err != nil {
		log.FromContext(ctx).Info("Shared workloads not listed for a change of the shared namespace", "error", err.Error())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, sw := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sw.Namespace, Name: sw.Name}})
	}
	return out
}
