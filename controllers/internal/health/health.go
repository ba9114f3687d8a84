// Package health judges whether what an environment's releases deployed is
// still running: kstatus's reading of each Deployment, StatefulSet and
// DaemonSet the releases own, and whether one was scaled below what its
// release asked for. Pure functions over the objects the operator's cache
// holds; the reconciler gathers them, this package gives the verdict.
package health

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
)

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

// Judge reads every object (Deployments, StatefulSets and DaemonSets; others
// are ignored) except those of the releases skip names (release.wait false:
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
