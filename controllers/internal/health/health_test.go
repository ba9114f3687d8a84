package health_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	"github.com/petri-dev/petri/controllers/internal/health"
)

func meta(name, release string, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Generation: 1,
		Labels:      map[string]string{contract.LabelRelease: release},
		Annotations: annotations,
	}
}

// deployment is a Deployment of release web asking for want replicas, with
// available of them available.
func deployment(name string, want, available int32, annotations map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: meta(name, "web", annotations),
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(want)},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1,
			Replicas:           want, UpdatedReplicas: want, ReadyReplicas: available, AvailableReplicas: available,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionStatus(map[bool]string{true: "True", false: "False"}[available == want])},
			},
		},
	}
}

func statefulSet(name string, want, ready int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: meta(name, "db", map[string]string{contract.AnnotationReplicas: fmt.Sprint(want)}),
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(want), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}},
		Status: appsv1.StatefulSetStatus{
			ObservedGeneration: 1, Replicas: want, ReadyReplicas: ready, CurrentReplicas: want, UpdatedReplicas: want, AvailableReplicas: ready,
			CurrentRevision: "r1", UpdateRevision: "r1",
		},
	}
}

func daemonSet(name string, desired, ready int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: meta(name, "agent", nil),
		Status: appsv1.DaemonSetStatus{
			ObservedGeneration: 1, DesiredNumberScheduled: desired, CurrentNumberScheduled: desired,
			UpdatedNumberScheduled: desired, NumberAvailable: ready, NumberReady: ready,
		},
	}
}

func asked(n string) map[string]string { return map[string]string{contract.AnnotationReplicas: n} }

func TestJudge(t *testing.T) {
	deadline := deployment("web", 1, 0, nil)
	deadline.Status.Conditions[0] = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}
	unobserved := deployment("web", 1, 1, nil)
	unobserved.Generation = 2
	unobservedDown := deployment("web", 1, 0, nil)
	unobservedDown.Generation = 2
	deleting := deployment("web", 1, 1, nil)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	scaledSet := statefulSet("db", 0, 0)
	scaledSet.Annotations[contract.AnnotationReplicas] = "3"
	for _, tc := range []struct {
		name string
		objs []client.Object
		skip []string
		want string
	}{
		{name: "nothing to judge"},
		{name: "available", objs: []client.Object{deployment("web", 2, 2, asked("2"))}},
		{name: "lost availability", objs: []client.Object{deployment("web", 1, 0, asked("1"))},
			want: "Deployment web: Available: 0/1"},
		{name: "progress deadline exceeded", objs: []client.Object{deadline},
			want: "Deployment web: Progress deadline exceeded"},
		{name: "a change not observed yet is judged by what runs", objs: []client.Object{unobserved}},
		{name: "a change not observed yet, while it does not run", objs: []client.Object{unobservedDown},
			want: "Deployment web: Available: 0/1"},
		{name: "being deleted", objs: []client.Object{deleting}, want: "Deployment web: being deleted"},
		{name: "scaled to zero by someone else", objs: []client.Object{deployment("web", 0, 0, asked("2"))},
			want: "Deployment web: scaled to 0 replicas; its release asks for 2"},
		{name: "asleep", objs: []client.Object{deployment("web", 0, 0, map[string]string{contract.AnnotationReplicas: "2", contract.AnnotationReplicasBeforeSleep: "2"})}},
		{name: "its chart asks for none", objs: []client.Object{deployment("web", 0, 0, asked("0"))}},
		{name: "its chart names no replicas (an autoscaler's)", objs: []client.Object{deployment("web", 0, 0, nil)}},
		{name: "scaled down, not to zero: it still runs", objs: []client.Object{deployment("web", 1, 1, asked("3"))}},
		{name: "statefulset not ready", objs: []client.Object{statefulSet("db", 1, 0)},
			want: "StatefulSet db: Ready: 0/1"},
		{name: "statefulset scaled to zero", objs: []client.Object{scaledSet},
			want: "StatefulSet db: scaled to 0 replicas; its release asks for 3"},
		{name: "daemonset not available", objs: []client.Object{daemonSet("agent", 2, 1)},
			want: "DaemonSet agent: Available: 1/2"},
		{name: "a release not waited for is not judged", objs: []client.Object{deployment("web", 1, 0, nil), statefulSet("db", 1, 0)}, skip: []string{"web"},
			want: "StatefulSet db: Ready: 0/1"},
		{name: "ordered by kind and name", objs: []client.Object{statefulSet("db", 1, 0), deployment("web", 1, 0, nil), deployment("api", 0, 0, asked("1")), statefulSet("cache", 2, 2)},
			want: "Deployment api: scaled to 0 replicas; its release asks for 1; Deployment web: Available: 0/1; StatefulSet db: Ready: 0/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := health.Judge(tc.objs, func(release string) bool {
				for _, s := range tc.skip {
					if s == release {
						return true
					}
				}
				return false
			})
			assert.Equal(t, tc.want, v.Message())
			assert.Equal(t, tc.want == "", v.Healthy())
		})
	}
}

// A namespace of many broken workloads is named in part, and counted.
func TestMessageNamesAFewAndCountsTheRest(t *testing.T) {
	var objs []client.Object
	for i := range health.MaxNamed + 3 {
		objs = append(objs, deployment(fmt.Sprintf("web-%d", i), 1, 0, nil))
	}
	v := health.Judge(objs, nil)
	assert.Len(t, v.Problems, health.MaxNamed+3)
	assert.Equal(t, "Deployment web-0: Available: 0/1; Deployment web-1: Available: 0/1; Deployment web-2: Available: 0/1; "+
		"Deployment web-3: Available: 0/1; Deployment web-4: Available: 0/1; and 3 more", v.Message())
}

// The memory names a workload gone since its release's deploy, forgets a
// release once it is deployed again or leaves, and does not count one
// being deleted as gone.
func TestMemoryMissing(t *testing.T) {
	web, db := deployment("web", 1, 1, nil), statefulSet("db", 1, 1)
	refWeb := health.Ref{Kind: "Deployment", Name: "web", Release: "web"}
	deploys := map[string]string{"web": "job-1/1", "db": "job-2/1"}
	var m health.Memory
	assert.Empty(t, m.Missing("e", deploys, []client.Object{web, db}))
	assert.Equal(t, []health.Ref{refWeb}, m.Missing("e", deploys, []client.Object{db}), "web deleted")
	assert.Empty(t, m.Missing("other", deploys, nil), "another environment saw nothing")
	assert.Equal(t, []health.Ref{refWeb}, m.Missing("e", deploys, []client.Object{db}), "still gone")
	assert.Empty(t, m.Missing("e", deploys, []client.Object{web, db}), "made again")

	deleting := web.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	assert.Empty(t, m.Missing("e", deploys, []client.Object{deleting, db}), "being deleted: the verdict says so")

	assert.Empty(t, m.Missing("e", map[string]string{"web": "job-3/2", "db": "job-2/1"}, []client.Object{db}), "web deployed again: its manifest may have dropped it")
	assert.Equal(t, []health.Ref{{Kind: "StatefulSet", Name: "db", Release: "db"}}, m.Missing("e", map[string]string{"db": "job-2/1"}, nil), "db deleted; web being deployed")
	assert.Empty(t, m.Missing("e", map[string]string{"web": "job-3/2"}, nil), "db left the environment; web's new deploy saw no Deployment")

	v := health.Judge([]client.Object{statefulSet("db", 1, 0)}, nil).With([]health.Problem{health.Deleted(refWeb)}, nil)
	assert.Equal(t, "Deployment web: deleted; its release asks for it; StatefulSet db: Ready: 0/1", v.Message())
	assert.True(t, health.Verdict{}.With([]health.Problem{health.Deleted(refWeb)}, func(string) bool { return true }).Healthy(), "release.wait false: not judged")
}
