package controllers

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/clusters"
	"github.com/petri-dev/petri/controllers/internal/health"
	"github.com/petri-dev/petri/controllers/internal/route"
)

// The health watch keeps an environment's Ready honest after its deploy:
// the operator watches the Deployments, StatefulSets, DaemonSets and Jobs
// its releases wrote (the deployer labels each petri.dev/release), through
// caches that hold those objects only and only what kstatus reads of them
// (the Jobs in one of their own, apart from Petri's), and an environment
// whose workload stops running, is deleted, or whose Job failed, is
// Degraded until that is over. An event wakes the environment only when
// what its workloads say differs from what its status says; its pass
// writes the status, as for any other change. An environment placed in a
// workload cluster is watched there the same way: each connection's cache
// holds that cluster's workloads, and a cache of its own its releases' Jobs.

// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch

// workloadKinds are the kinds the health watch reads.
func workloadKinds() []client.Object {
	return []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.DaemonSet{}}
}

// workloadCaches add the health watch's kinds to a cache's settings: every
// namespace, objects of a release only, slimmed. Nothing with
// --workload-health=false.
func workloadCaches(o Options, byObject map[client.Object]cache.ByObject) {
	if !o.WorkloadHealth {
		return
	}
	ofRelease, err := labels.NewRequirement(contract.LabelRelease, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	sel := labels.NewSelector().Add(*ofRelease)
	for _, obj := range workloadKinds() {
		byObject[obj] = cache.ByObject{
			Namespaces: map[string]cache.Config{cache.AllNamespaces: {}},
			Label:      sel,
			Transform:  slimWorkload,
		}
	}
}

// slimWorkload keeps of a cached workload what health.Judge and kstatus
// read: its name, generation, deletion, release label, the two replica
// annotations, its replicas and rollout settings, and its status. The pod
// template, the largest part, is dropped.
func slimWorkload(in any) (any, error) {
	obj, ok := in.(client.Object)
	if !ok {
		return in, nil
	}
	meta := slimMeta(obj)
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &appsv1.Deployment{ObjectMeta: meta, Status: o.Status, Spec: appsv1.DeploymentSpec{
			Replicas: o.Spec.Replicas, ProgressDeadlineSeconds: o.Spec.ProgressDeadlineSeconds, Paused: o.Spec.Paused,
		}}, nil
	case *appsv1.StatefulSet:
		return &appsv1.StatefulSet{ObjectMeta: meta, Status: o.Status, Spec: appsv1.StatefulSetSpec{
			Replicas: o.Spec.Replicas, UpdateStrategy: o.Spec.UpdateStrategy,
		}}, nil
	case *appsv1.DaemonSet:
		return &appsv1.DaemonSet{ObjectMeta: meta, Status: o.Status, Spec: appsv1.DaemonSetSpec{UpdateStrategy: o.Spec.UpdateStrategy}}, nil
	case *batchv1.Job:
		return &batchv1.Job{ObjectMeta: meta, Status: o.Status, Spec: batchv1.JobSpec{Parallelism: o.Spec.Parallelism, Completions: o.Spec.Completions}}, nil
	}
	return in, nil
}

func slimMeta(obj client.Object) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		Generation: obj.GetGeneration(), DeletionTimestamp: obj.GetDeletionTimestamp(),
		Labels: map[string]string{contract.LabelRelease: obj.GetLabels()[contract.LabelRelease]},
	}
	for _, key := range []string{contract.AnnotationReplicas, contract.AnnotationReplicasBeforeSleep} {
		if v, ok := obj.GetAnnotations()[key]; ok {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[key] = v
		}
	}
	return m
}

// workloadWatch is the health watch: the management cluster's caches it
// reads, and the workloads it has seen of each release's deploy, by which
// it tells one deleted outright (the cache no longer holds it).
type workloadWatch struct {
	// cache is the manager's: the namespaces the operator created, the
	// environments, and the workloads of the releases.
	cache client.Reader
	// jobs is the releases' Jobs: a cache of its own, since the
	// manager's holds Petri's own Jobs, in its namespace only.
	jobs cache.Cache
	seen health.Memory
}

// releaseJobsCache is a cache of the Jobs the releases own in cl, in every
// namespace: those labelled petri.dev/release and not Petri's own,
// slimmed to what kstatus reads of a Job.
func releaseJobsCache(cl cluster.Cluster) (cache.Cache, error) {
	return cache.New(cl.GetConfig(), cache.Options{
		HTTPClient: cl.GetHTTPClient(), Scheme: cl.GetScheme(), Mapper: cl.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&batchv1.Job{}: {Label: releaseJobs(), Transform: slimWorkload}},
	})
}

// releaseJobs selects the Jobs of a release that are not Petri's own.
func releaseJobs() labels.Selector {
	ofRelease, err := labels.NewRequirement(contract.LabelRelease, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	notPetris, err := labels.NewRequirement(petriv1.LabelManagedBy, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*ofRelease, *notPetris)
}

// watchWorkloads makes the environment controller hear its workloads in
// the management cluster; nothing with --workload-health=false.
func (r *EphemeralEnvironmentReconciler) watchWorkloads(mgr manager.Manager, b *builder.Builder) (*builder.Builder, error) {
	if !r.Options.WorkloadHealth {
		return b, nil
	}
	jobs, err := releaseJobsCache(mgr)
	if err != nil {
		return nil, fmt.Errorf("cache the releases' Jobs: %w", err)
	}
	if err := mgr.Add(jobs); err != nil {
		return nil, fmt.Errorf("cache the releases' Jobs: %w", err)
	}
	r.workloads = &workloadWatch{cache: mgr.GetCache(), jobs: jobs}
	toEnv := handler.EnqueueRequestsFromMapFunc(r.environmentIfHealthMoved(nil))
	for _, obj := range workloadKinds() {
		b = b.Watches(obj, toEnv)
	}
	return b.WatchesRawSource(source.Kind[client.Object](jobs, &batchv1.Job{}, toEnv)), nil
}

// watchClusterWorkloads is the health watch in a workload cluster, for the
// life of its connection: the connection's cache holds the cluster's
// workloads (workloadCaches), a cache of its own the releases' Jobs there
// (started with the connection); the connection's target reads both, the
// connection is synced once they are, and their events reach the
// environment controller through events. Nothing with
// --workload-health=false.
func (r *EphemeralEnvironmentReconciler) watchClusterWorkloads(conn *clusters.Conn, events *clusters.Events) error {
	if r.workloads == nil {
		return nil
	}
	jobs, err := releaseJobsCache(conn.Cluster)
	if err != nil {
		return fmt.Errorf("cache the releases' Jobs in workload cluster %s: %w", conn.Name, err)
	}
	ctx := conn.Context()
	go func() {
		if err := jobs.Start(ctx); err != nil {
			log.FromContext(ctx).Error(err, "Releases' Jobs cache stopped", "cluster", conn.Name)
		}
	}()
	workloads := conn.Cluster.GetCache()
	conn.Target.Workloads, conn.Target.ReleaseJobs = workloads, jobs
	conn.WaitFor(func(ctx context.Context) bool {
		for _, obj := range workloadKinds() {
			// Blocks until the kind's informer has synced.
			if _, err := workloads.GetInformer(ctx, obj); err != nil {
				return false
			}
		}
		return jobs.WaitForCacheSync(ctx)
	})
	toEnv := handler.EnqueueRequestsFromMapFunc(r.environmentIfHealthMoved(conn.Target))
	for _, obj := range workloadKinds() {
		events.Add(ctx, conn.Name, source.Kind[client.Object](workloads, obj, toEnv))
	}
	events.Add(ctx, conn.Name, source.Kind[client.Object](jobs, &batchv1.Job{}, toEnv))
	return nil
}

// environmentIfHealthMoved maps a workload of cluster t (nil: the
// management cluster) to its environment (through its namespace's
// ownership annotation), only when what the environment's workloads now
// say differs from its status: a Ready environment with a workload that
// stopped, a Degraded one whose workloads changed or run again. Any other
// environment is moving already, and its own passes judge its workloads.
func (r *EphemeralEnvironmentReconciler) environmentIfHealthMoved(t *clusters.Target) handler.MapFunc {
	namespaces, cluster := r.workloads.cache, ""
	if t != nil {
		namespaces, cluster = t.NamespaceCache, t.Name
	}
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		var ns corev1.Namespace
		if err := namespaces.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, &ns); err != nil {
			// Not a namespace the operator created (the shared
			// namespace, anyone else's).
			return nil
		}
		reqs := namespaceOwner(ctx, &ns)
		if len(reqs) == 0 {
			return nil
		}
		env := &petriv1.EphemeralEnvironment{}
		if err := r.workloads.cache.Get(ctx, reqs[0].NamespacedName, env); err != nil {
			return nil
		}
		if env.Status.Cluster != cluster || env.Status.TargetNamespace != obj.GetNamespace() || !judged(env) {
			return nil
		}
		unhealthy := r.unhealthyWorkloads(route.With(ctx, t), env)
		if !healthMoved(env, unhealthy) {
			return nil
		}
		log.FromContext(ctx).V(1).Info("Workloads say something else than the status", "environment", reqs[0].NamespacedName, "cluster", cluster, "phase", env.Status.Phase, "unhealthy", unhealthy, "object", obj.GetName(), "resourceVersion", obj.GetResourceVersion())
		return reqs
	}
}

// judged: the environment's status speaks of its workloads' health (Ready
// or Degraded); any other is moving already, and its own passes judge them.
func judged(env *petriv1.EphemeralEnvironment) bool {
	return env.Status.Phase == petriv1.EnvironmentReady || env.Status.Phase == petriv1.EnvironmentDegraded
}

// healthMoved reports whether unhealthy (health.Verdict's message) says
// something else than the environment's status.
func healthMoved(env *petriv1.EphemeralEnvironment, unhealthy string) bool {
	switch env.Status.Phase {
	case petriv1.EnvironmentReady:
		return unhealthy != ""
	case petriv1.EnvironmentDegraded:
		ready := apimeta.FindStatusCondition(env.Status.Conditions, petriv1.ConditionReady)
		return ready == nil || ready.Reason != petriv1.ReasonWorkloadsUnhealthy || ready.Message != unhealthy
	}
	return false
}

// unhealthyWorkloads is the health verdict's message over the environment's
// workloads in the cache of its cluster (for an environment placed in a
// workload cluster, that of the pass's target, ctx's): empty when they all
// run, or when they are not watched (--workload-health=false, a pass
// without its workload cluster's target). Releases deployed with
// release.wait false are not judged: nobody promised they run.
func (r *EphemeralEnvironmentReconciler) unhealthyWorkloads(ctx context.Context, env *petriv1.EphemeralEnvironment) string {
	if r.workloads == nil || env.Status.TargetNamespace == "" {
		return ""
	}
	workloads, jobs := client.Reader(r.workloads.cache), client.Reader(r.workloads.jobs)
	if env.Status.Cluster != "" {
		t := route.Of(ctx)
		if t == nil || t.Name != env.Status.Cluster || t.Workloads == nil {
			return ""
		}
		workloads, jobs = t.Workloads, t.ReleaseJobs
	}
	var objs []client.Object
	in := client.InNamespace(env.Status.TargetNamespace)
	var deployments appsv1.DeploymentList
	var statefulSets appsv1.StatefulSetList
	var daemonSets appsv1.DaemonSetList
	var jobList batchv1.JobList
	for _, list := range []client.ObjectList{&deployments, &statefulSets, &daemonSets, &jobList} {
		from := workloads
		if list == &jobList {
			from = jobs
		}
		if err := from.List(ctx, list, in, client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "List workloads from the cache", "namespace", env.Status.TargetNamespace)
			return ""
		}
	}
	for i := range deployments.Items {
		objs = append(objs, &deployments.Items[i])
	}
	for i := range statefulSets.Items {
		objs = append(objs, &statefulSets.Items[i])
	}
	for i := range daemonSets.Items {
		objs = append(objs, &daemonSets.Items[i])
	}
	for i := range jobList.Items {
		objs = append(objs, &jobList.Items[i])
	}
	var deleted []health.Problem
	for _, ref := range r.workloads.seen.Missing(string(env.UID), deployedReleases(env), objs) {
		deleted = append(deleted, health.Deleted(ref))
	}
	notWaited := notWaitedFor(env)
	skip := func(release string) bool {
		for _, c := range notWaited {
			if c == release {
				return true
			}
		}
		return false
	}
	return health.Judge(objs, skip).With(deleted, skip).Message()
}

// deployedReleases maps each release whose deploy is done to that deploy
// (its Job and revision): what the health watch remembers of a release's
// workloads holds until its next deploy. A release being deployed is left
// out: Helm deletes what the new manifest drops.
func deployedReleases(env *petriv1.EphemeralEnvironment) map[string]string {
	deploys := map[string]string{}
	for _, c := range env.Status.Components {
		if c.Phase == petriv1.ComponentDeployed {
			deploys[c.Name] = c.Job + "/" + strconv.Itoa(int(c.Revision))
		}
	}
	return deploys
}
