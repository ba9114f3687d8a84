// Package health judges whether what an environment's releases deployed is
// still running: kstatus's reading of each Deployment, StatefulSet,
// DaemonSet and Job the releases own, whether one was scaled below what its
// release asked for, and whether one the releases deployed is gone. Pure functions over the objects the operator's cache
// holds; the reconciler gathers them, this package gives the verdict.
package health

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
)

// Resources are what the health watch reads of a cluster, in every
// namespace (get, list, watch): the kinds Judge reads.
var Resources = []schema.GroupResource{
	{Group: "apps", Resource: "deployments"}, {Group: "apps", Resource: "statefulsets"},
	{Group: "apps", Resource: "daemonsets"}, {Group: "batch", Resource: "jobs"},
}

// Problem is one object that is not running as its release asked.
type Problem struct {
	// Kind and Name name the object; Release is the release it belongs to.
	Kind, Name, Release string
	// Reason is kstatus's message ("Available: 0/1", "Progress deadline
	// exceeded"), or what changed ("scaled to 0 replicas; its release asks
	// for 2").
	Reason string
}

func (p Problem) String() string { return p.Kind + " " + p.Name + ": " + p.Reason }

// Verdict is what an environment's workloads add up to: healthy when it
// names no problem.
type Verdict struct {
	Problems []Problem
}

// Healthy reports whether every judged object runs as its release asked.
func (v Verdict) Healthy() bool { return len(v.Problems) == 0 }

// MaxNamed is how many objects a message names; the others are counted.
const MaxNamed = 5

// Message names each object that is not running and why, in a stable order,
// so that the same state always reads the same (the health watch compares
// it with the status); empty when healthy.
func (v Verdict) Message() string {
	parts := make([]string, 0, min(len(v.Problems), MaxNamed)+1)
	for i, p := range v.Problems {
		if i == MaxNamed {
			parts = append(parts, fmt.Sprintf("and %d more", len(v.Problems)-MaxNamed))
			break
		}
		parts = append(parts, p.String())
	}
	return strings.Join(parts, "; ")
}

// Judge reads every object (Deployments, StatefulSets, DaemonSets and Jobs,
// of which only a failed one is a problem; others are ignored) except those of the releases skip names (release.wait false:
// nobody promised they run), and orders the problems by kind and name.
func Judge(objs []client.Object, skip func(release string) bool) Verdict {
	var v Verdict
	for _, obj := range objs {
		release := obj.GetLabels()[contract.LabelRelease]
		if skip != nil && skip(release) {
			continue
		}
		kind := kindOf(obj)
		if kind == "" {
			continue
		}
		if reason, ok := judge(obj, kind); !ok {
			v.Problems = append(v.Problems, Problem{Kind: kind, Name: obj.GetName(), Release: release, Reason: reason})
		}
	}
	slices.SortFunc(v.Problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return v
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *appsv1.StatefulSet:
		return "StatefulSet"
	case *appsv1.DaemonSet:
		return "DaemonSet"
	case *batchv1.Job:
		return "Job"
	}
	return ""
}

// judge is one object's reading: whether it runs, and if not, why.
func judge(obj client.Object, kind string) (string, bool) {
	if reason, scaled := scaledDown(obj); scaled {
		return reason, false
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return "cannot be read: " + err.Error(), false
	}
	u := &unstructured.Unstructured{Object: content}
	// Objects from a typed cache carry no apiVersion and kind; kstatus
	// reads an object by them.
	u.SetAPIVersion(appsv1.SchemeGroupVersion.String())
	if kind == "Job" {
		u.SetAPIVersion(batchv1.SchemeGroupVersion.String())
	}
	u.SetKind(kind)
	if observed, found, _ := unstructured.NestedInt64(content, "status", "observedGeneration"); found && observed < obj.GetGeneration() {
		// A change its controller has not observed yet says nothing of
		// what runs: kstatus would read it as in progress, and a
		// Deployment's generation moves with its annotations too (they
		// are copied to its ReplicaSets), so that an annotation added
		// by anyone would read as a stopped workload for a moment. What
		// its status says is what runs until the controller speaks.
		_ = unstructured.SetNestedField(content, obj.GetGeneration(), "status", "observedGeneration")
	}
	res, err := kstatus.Compute(u)
	if err != nil {
		return "cannot be read: " + err.Error(), false
	}
	if kind == "Job" && res.Status != kstatus.FailedStatus {
		// A Job that runs, or has not started, is doing what its
		// release asked; one that failed is not.
		return "", true
	}
	switch res.Status {
	case kstatus.CurrentStatus:
		return "", true
	case kstatus.TerminatingStatus:
		return "being deleted", false
	}
	if res.Message == "" {
		return string(res.Status), false
	}
	return res.Message, false
}

// scaledDown reports a Deployment or StatefulSet at zero replicas whose
// release asked for more (contract.AnnotationReplicas), and that no sleep
// scaled (contract.AnnotationReplicasBeforeSleep): at zero, kstatus reads
// it as Current, since nothing is left to start.
func scaledDown(obj client.Object) (string, bool) {
	var replicas *int32
	switch o := obj.(type) {
	case *appsv1.Deployment:
		replicas = o.Spec.Replicas
	case *appsv1.StatefulSet:
		replicas = o.Spec.Replicas
	default:
		return "", false
	}
	annotations := obj.GetAnnotations()
	asked, err := strconv.ParseInt(annotations[contract.AnnotationReplicas], 10, 32)
	if err != nil || asked <= 0 || replicas == nil || *replicas != 0 {
		return "", false
	}
	if _, asleep := annotations[contract.AnnotationReplicasBeforeSleep]; asleep {
		return "", false
	}
	return fmt.Sprintf("scaled to 0 replicas; its release asks for %d", asked), true
}

// Ref names a workload of a release.
type Ref struct {
	Kind, Name, Release string
}

// RefOf names obj; ok is false for a kind the verdict does not read.
func RefOf(obj client.Object) (Ref, bool) {
	kind := kindOf(obj)
	return Ref{Kind: kind, Name: obj.GetName(), Release: obj.GetLabels()[contract.LabelRelease]}, kind != ""
}

// Deleted is the problem of a workload its release deployed that is gone.
func Deleted(ref Ref) Problem {
	return Problem{Kind: ref.Kind, Name: ref.Name, Release: ref.Release, Reason: "deleted; its release asks for it"}
}

// With adds problems to the verdict, except those of the releases skip
// names, in the verdict's order.
func (v Verdict) With(problems []Problem, skip func(release string) bool) Verdict {
	for _, p := range problems {
		if skip == nil || !skip(p.Release) {
			v.Problems = append(v.Problems, p)
		}
	}
	slices.SortFunc(v.Problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return v
}

// Memory is what tells a workload deleted outright from one its release
// never had: the cache no longer holds a deleted object, and the release's
// manifest is not in it. It remembers, per environment and per release,
// the workloads seen since that release's last deploy (the deploy's name:
// its Job), and a new deploy forgets them (Helm deletes what the new
// manifest drops, and makes again what it still asks for). It lives as
// long as the process: after a restart, what is seen first is what is
// remembered.
type Memory struct {
	mu   sync.Mutex
	envs map[string]map[string]*seen
}

type seen struct {
	deploy string
	refs   map[Ref]struct{}
}

// Missing records objs (the environment's workloads in the cache) under
// the deploys of env's releases that are done (deploys maps a release to
// its deploy's name) and returns the remembered workloads that objs lack,
// ordered by kind and name. A release that is not in deploys is forgotten:
// it is being deployed, or it left the environment.
func (m *Memory) Missing(env string, deploys map[string]string, objs []client.Object) []Ref {
	// One being deleted is still there (the verdict says it is being
	// deleted), and is not remembered anew.
	present := make(map[Ref]bool, len(objs))
	for _, obj := range objs {
		if ref, ok := RefOf(obj); ok && ref.Kind != "Job" {
			present[ref] = obj.GetDeletionTimestamp() == nil
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.envs == nil {
		m.envs = map[string]map[string]*seen{}
	}
	releases := m.envs[env]
	if releases == nil {
		if len(deploys) == 0 {
			return nil
		}
		releases = map[string]*seen{}
		m.envs[env] = releases
	}
	for release, s := range releases {
		if deploys[release] != s.deploy {
			delete(releases, release)
		}
	}
	for release, deploy := range deploys {
		if releases[release] == nil {
			releases[release] = &seen{deploy: deploy, refs: map[Ref]struct{}{}}
		}
	}
	var missing []Ref
	for ref, live := range present {
		if s := releases[ref.Release]; s != nil && live {
			s.refs[ref] = struct{}{}
		}
	}
	for _, s := range releases {
		for ref := range s.refs {
			if _, ok := present[ref]; !ok {
				missing = append(missing, ref)
			}
		}
	}
	if len(releases) == 0 {
		delete(m.envs, env)
	}
	slices.SortFunc(missing, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return missing
}

// Remembers reports whether anything is remembered of env.
func (m *Memory) Remembers(env string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.envs[env] != nil
}

// Forget drops what is remembered of env (it is gone).
func (m *Memory) Forget(env string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.envs, env)
}
