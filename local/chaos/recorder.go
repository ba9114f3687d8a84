package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/local/controlplane"
	"github.com/petri-dev/petri/sync/render"
)

// Labels of the Jobs the operator creates (controllers/internal/jobs).
const (
	labelComponent  = "petri.dev/component"
	labelAction     = "petri.dev/action"
	labelGeneration = "petri.dev/generation"
)

// recorder watches everything the invariants are judged on for the whole
// run (EphemeralEnvironments, Petri's Jobs and their pods, namespaces) and
// keeps what it saw after the objects are gone, together with the ledger of
// what the suite itself did (its deletes and faults).
type recorder struct {
	mu sync.Mutex

	envs       map[types.UID]*envRecord
	jobs       map[types.UID]*jobRecord
	pods       map[types.UID]*podRecord
	namespaces map[string]*nsRecord

	// userDeletes are the environments the suite deleted, as a user would.
	userDeletes map[types.UID]bool
	// excuses are, per owner (environment UID), the times a fault removed
	// one of its Jobs or what it deployed: a Job created again after that is
	// not a duplicate.
	excuses map[types.UID][]time.Time
	// foreign are namespaces the suite made or tampered with: not Petri's.
	foreign map[string]types.UID

	// closedPR tells whether a pull request of a repository is closed on
	// the GitHub stand-in.
	closedPR func(forge, repository string, number int) bool
	// expiries are the environments (by name) a scenario expects sync to
	// delete because their ttl is up: scenario 8 checks when they go.
	expiries map[string]bool

	// live are breaches seen as they happened, not yet reported.
	live []Violation
}

type envRecord struct {
	uid    types.UID
	name   string
	labels map[string]string
	// target is the current status.targetNamespace; targets every name it
	// has held; bound the names NamespaceBound was seen True on.
	target  string
	targets []string
	bound   map[string]bool
	// moves are the changes of status.targetNamespace, judged by
	// targetMoves once the namespaces' events are in.
	moves      []targetMove
	deleting   time.Time
	gone       time.Time
	lastStatus petriv1.EphemeralEnvironmentStatus
}

// targetMove is one change of an environment's status.targetNamespace.
type targetMove struct{ from, to string }

type jobRecord struct {
	uid                types.UID
	name               string
	owner              types.UID
	key                string
	created            time.Time
	failed, succeeded  time.Time
	deleted            time.Time
	component, action  string
	generation         string
	environmentNameTag string
}

type podRecord struct {
	uid        types.UID
	name, job  string
	release    string // namespace/release
	action     string
	start, end time.Time
	deleted    time.Time
}

type nsRecord struct {
	name   string
	uid    types.UID
	labels map[string]string
	// madeFor are the environments (by UID label) a namespace of this
	// name was made for by Petri: every incarnation not made by the suite.
	madeFor map[string]bool
	created time.Time
	deleted time.Time
}

func newRecorder(closedPR func(forge, repository string, number int) bool) *recorder {
	return &recorder{
		envs: map[types.UID]*envRecord{}, jobs: map[types.UID]*jobRecord{}, pods: map[types.UID]*podRecord{},
		namespaces: map[string]*nsRecord{}, userDeletes: map[types.UID]bool{}, excuses: map[types.UID][]time.Time{},
		foreign: map[string]types.UID{}, closedPR: closedPR, expiries: map[string]bool{},
	}
}

// expectExpiry records that an environment's ttl makes its deletion
// justified; the scenario that expects it checks its timing.
func (r *recorder) expectExpiry(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expiries[name] = true
}

// start runs the informers until ctx ends and returns once they are synced.
func (r *recorder) start(ctx context.Context, cfg *rest.Config, managementNamespace string) error {
	owned := labels.SelectorFromSet(labels.Set{petriv1.LabelManagedBy: petriv1.ManagedByOperator})
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 100, 200
	c, err := cache.New(cfg, cache.Options{
		Scheme: controlplane.Scheme(),
		ByObject: map[client.Object]cache.ByObject{
			&petriv1.EphemeralEnvironment{}: {Namespaces: map[string]cache.Config{managementNamespace: {}}},
			&batchv1.Job{}:                  {Label: owned},
			&corev1.Pod{}:                   {Label: owned},
		},
	})
	if err != nil {
		return fmt.Errorf("watch cache: %w", err)
	}
	return runHandlers(ctx, c, "watch cache", []handled{
		{&petriv1.EphemeralEnvironment{}, r.onEnvironment},
		{&batchv1.Job{}, r.onJob},
		{&corev1.Pod{}, r.onPod},
		{&corev1.Namespace{}, r.onNamespace},
	})
}

// handled is an object type the recorder watches and its handler.
type handled struct {
	obj client.Object
	fn  func(obj any, deleted bool)
}

// runHandlers hands the cache's events of each type to its handler (a
// deletion's last known state too), starts the cache until ctx ends and
// returns once it is synced; what names the cache in errors.
func runHandlers(ctx context.Context, c cache.Cache, what string, handlers []handled) error {
	for _, h := range handlers {
		inf, err := c.GetInformer(ctx, h.obj)
		if err != nil {
			return fmt.Errorf("informer: %w", err)
		}
		fn := h.fn
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { fn(obj, false) },
			UpdateFunc: func(_, obj any) { fn(obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				fn(obj, true)
			},
		}); err != nil {
			return err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("%s did not sync", what)
	}
	return nil
}

func (r *recorder) onEnvironment(obj any, deleted bool) {
	env, ok := obj.(*petriv1.EphemeralEnvironment)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.envs[env.UID]
	if rec == nil {
		rec = &envRecord{uid: env.UID, name: env.Name}
		r.envs[env.UID] = rec
	}
	rec.labels = env.Labels
	rec.lastStatus = *env.Status.DeepCopy()
	if t := env.Status.TargetNamespace; t != "" && t != rec.target {
		if rec.target != "" {
			rec.moves = append(rec.moves, targetMove{from: rec.target, to: t})
		}
		rec.targets = append(rec.targets, t)
		rec.target = t
	}
	if t := env.Status.TargetNamespace; t != "" && apimeta.IsStatusConditionTrue(env.Status.Conditions, petriv1.ConditionNamespaceBound) {
		if rec.bound == nil {
			rec.bound = map[string]bool{}
		}
		rec.bound[t] = true
	}
	if (deleted || env.DeletionTimestamp != nil) && rec.deleting.IsZero() {
		rec.deleting = now
		if why := r.unjustified(env); why != "" {
			r.live = append(r.live, Violation{Invariant: NoUnjustifiedDeletion, Key: "delete/" + string(env.UID), Env: env.Name, Detail: why})
		}
	}
	if deleted {
		rec.gone = now
	}
}

// unjustified says why a deletion had no cause, or "".
func (r *recorder) unjustified(env *petriv1.EphemeralEnvironment) string {
	if r.userDeletes[env.UID] || r.expiries[env.Name] {
		return ""
	}
	if render.Owned(env.Labels) {
		var n int
		repo := env.Annotations[render.AnnotationRepository]
		if _, err := fmt.Sscan(env.Labels[render.LabelPullRequest], &n); err == nil && r.closedPR != nil && r.closedPR(env.Annotations[render.AnnotationForge], repo, n) {
			return ""
		}
		return fmt.Sprintf("environment %s (pull request #%s) was deleted while its pull request is open and no user deleted it", env.Name, env.Labels[render.LabelPullRequest])
	}
	return fmt.Sprintf("environment %s was deleted, and no user deleted it", env.Name)
}

func (r *recorder) onJob(obj any, deleted bool) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.jobs[job.UID]
	if rec == nil {
		owner := types.UID(job.Labels[petriv1.LabelEnvironmentUID])
		if ref := metav1.GetControllerOf(job); ref != nil {
			owner = ref.UID
		}
		rec = &jobRecord{
			uid: job.UID, name: job.Name, owner: owner, created: job.CreationTimestamp.Time,
			component: job.Labels[labelComponent], action: job.Labels[labelAction], generation: job.Labels[labelGeneration],
			environmentNameTag: job.Labels[petriv1.LabelEnvironment],
		}
		rec.key = strings.Join([]string{string(owner), rec.component, rec.action, rec.generation}, "/")
		r.jobs[job.UID] = rec
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobFailed:
			if rec.failed.IsZero() {
				rec.failed = c.LastTransitionTime.Time
			}
		case batchv1.JobComplete:
			if rec.succeeded.IsZero() {
				rec.succeeded = c.LastTransitionTime.Time
			}
		}
	}
	if deleted && rec.deleted.IsZero() {
		rec.deleted = now
	}
}

// helmActions are the deployer commands that run a Helm operation on a
// release.
var helmActions = map[string]bool{"deploy": true, "undeploy": true}

func (r *recorder) onPod(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || len(pod.Spec.Containers) == 0 {
		return
	}
	args := pod.Spec.Containers[0].Args
	if len(args) == 0 || !helmActions[args[0]] {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.pods[pod.UID]
	if rec == nil {
		rec = &podRecord{uid: pod.UID, name: pod.Name, job: pod.Labels[batchv1.JobNameLabel], action: args[0],
			release: flagValue(args, "--namespace") + "/" + flagValue(args, "--release")}
		r.pods[pod.UID] = rec
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if s := cs.State.Running; s != nil && (rec.start.IsZero() || s.StartedAt.Time.Before(rec.start)) {
			rec.start = s.StartedAt.Time
		}
		if s := cs.State.Terminated; s != nil {
			if !s.StartedAt.IsZero() && (rec.start.IsZero() || s.StartedAt.Time.Before(rec.start)) {
				rec.start = s.StartedAt.Time
			}
			rec.end = s.FinishedAt.Time
		}
	}
	if deleted && rec.deleted.IsZero() {
		rec.deleted = now
	}
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func (r *recorder) onNamespace(obj any, deleted bool) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.namespaces[ns.Name]
	if rec == nil || rec.uid != ns.UID {
		next := &nsRecord{name: ns.Name, uid: ns.UID, created: ns.CreationTimestamp.Time}
		if rec != nil {
			next.madeFor = rec.madeFor
		}
		rec = next
		r.namespaces[ns.Name] = rec
	}
	rec.labels = ns.Labels
	if uid := ns.Labels[petriv1.LabelEnvironmentUID]; uid != "" && !r.isForeignLocked(ns.Name, ns.UID) {
		if rec.madeFor == nil {
			rec.madeFor = map[string]bool{}
		}
		rec.madeFor[uid] = true
	}
	if deleted {
		rec.deleted = now
	}
}

// userDelete records that the suite deletes an environment, before it does.
func (r *recorder) userDelete(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.userDeletes[uid] = true
}

// excuse records that a fault removed a Job of owner or what it deployed.
func (r *recorder) excuse(owner types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.excuses[owner] = append(r.excuses[owner], time.Now())
}

// markForeign records a namespace the suite made or tampered with.
func (r *recorder) markForeign(name string, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.foreign[name] = uid
}

// isForeignLocked tells whether the namespace name (in its incarnation
// uid) is one the suite made or tampered with. r.mu is held.
func (r *recorder) isForeignLocked(name string, uid types.UID) bool {
	f, ok := r.foreign[name]
	return ok && (f == "" || f == uid)
}

// targetMoves returns the changes of status.targetNamespace that broke the
// lock: a name is locked once NamespaceBound was True on it, or once Petri
// made a namespace under it for the environment. Before that the name is
// only reserved, and giving up a reserved name that someone else took
// first is the operator doing its job.
func (r *recorder) targetMoves() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Violation
	for _, e := range r.envs {
		for _, m := range e.moves {
			ns := r.namespaces[m.from]
			made := ns != nil && ns.madeFor[string(e.uid)]
			if !e.bound[m.from] && !made {
				continue
			}
			why := "it was bound there"
			if !e.bound[m.from] {
				why = "Petri had made its namespace there"
			}
			out = append(out, Violation{Invariant: NamespaceStable, Key: fmt.Sprintf("target/%s/%s", e.uid, m.to), Env: e.name,
				Detail: fmt.Sprintf("environment %s: status.targetNamespace changed from %q to %q after %s", e.name, m.from, m.to, why)})
		}
	}
	return out
}

// drainLive returns the breaches seen as they happened since the last call.
func (r *recorder) drainLive() []Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.live
	r.live = nil
	return out
}

// environment returns the record of an environment by name (the latest
// with that name).
func (r *recorder) environment(name string) *envRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *envRecord
	for _, e := range r.envs {
		if e.name == name && (best == nil || best.gone.IsZero() || !e.gone.IsZero() && e.gone.After(best.gone)) {
			best = e
		}
	}
	return best
}

// orphan is a namespace left behind, and its environment's name.
type orphan struct{ env, why string }

// orphanCandidates lists namespaces that exist and belong to an
// environment that does not: by Petri's labels, or as an environment's
// recorded target. Namespaces the suite made or tampered with are not
// Petri's and are skipped.
func (r *recorder) orphanCandidates() map[string]orphan {
	r.mu.Lock()
	defer r.mu.Unlock()
	alive := map[types.UID]bool{}
	for uid, e := range r.envs {
		if e.gone.IsZero() {
			alive[uid] = true
		}
	}
	out := map[string]orphan{}
	for name, ns := range r.namespaces {
		if !ns.deleted.IsZero() {
			continue
		}
		if uid, ok := r.foreign[name]; ok && (uid == "" || uid == ns.uid) {
			continue
		}
		uid := types.UID(ns.labels[petriv1.LabelEnvironmentUID])
		if uid != "" && ns.labels[petriv1.LabelManagedBy] == petriv1.ManagedByOperator && !alive[uid] {
			env, envName := "an environment", ""
			if e := r.envs[uid]; e != nil {
				env, envName = "environment "+e.name, e.name
			}
			out[name] = orphan{env: envName, why: fmt.Sprintf("namespace %s of %s (uid %s) is left after its environment is gone", name, env, uid)}
		}
	}
	for uid, e := range r.envs {
		if alive[uid] {
			continue
		}
		for _, t := range e.targets {
			ns := r.namespaces[t]
			if ns == nil || !ns.deleted.IsZero() || !ns.created.Before(e.gone) {
				continue
			}
			if fuid, ok := r.foreign[t]; ok && (fuid == "" || fuid == ns.uid) {
				continue
			}
			if _, ok := out[t]; !ok {
				out[t] = orphan{env: e.name, why: fmt.Sprintf("namespace %s, the target of environment %s, is left after the environment is gone", t, e.name)}
			}
		}
	}
	return out
}
