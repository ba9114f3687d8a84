package controllers

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/health"
)

// The cache keeps of a workload what the verdict reads, and nothing the
// verdict does not: the same verdict either way, without the pod
// template, managed fields, other labels and annotations.
func TestSlimWorkloadKeepsTheVerdict(t *testing.T) {
	full := func(replicas, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "shop-pr-1-ab12", Name: "web", Generation: 2,
				Labels:        map[string]string{contract.LabelRelease: "web", "app.kubernetes.io/name": "example-app"},
				Annotations:   map[string]string{contract.AnnotationReplicas: "2", "meta.helm.sh/release-name": "web"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "helm"}},
			},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(replicas), ProgressDeadlineSeconds: ptr.To[int32](600),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}}},
			},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: available, AvailableReplicas: available,
				Conditions: []appsv1.DeploymentCondition{
					{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
					{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue},
				}},
		}
	}
	for _, d := range []*appsv1.Deployment{full(2, 2), full(2, 1), full(0, 0)} {
		want := health.Judge([]client.Object{d.DeepCopy()}, nil)
		out, err := slimWorkload(d.DeepCopy())
		require.NoError(t, err)
		slim := out.(*appsv1.Deployment)
		assert.Equal(t, want, health.Judge([]client.Object{slim}, nil))
		assert.Empty(t, slim.Spec.Template.Spec.Containers)
		assert.Empty(t, slim.ManagedFields)
		assert.Equal(t, map[string]string{contract.LabelRelease: "web"}, slim.Labels)
		assert.Equal(t, map[string]string{contract.AnnotationReplicas: "2"}, slim.Annotations)
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{contract.LabelRelease: "db"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db"}}}}}}
	out, err := slimWorkload(sts)
	require.NoError(t, err)
	assert.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, out.(*appsv1.StatefulSet).Spec.UpdateStrategy.Type, "kstatus reads it")
	assert.Empty(t, out.(*appsv1.StatefulSet).Spec.Template.Spec.Containers)
}

// An event wakes an environment only when its workloads say something
// else than its status.
func TestHealthMoved(t *testing.T) {
	at := func(phase petriv1.EnvironmentPhase, reason, msg string) *petriv1.EphemeralEnvironment {
		e := &petriv1.EphemeralEnvironment{}
		e.Status.Phase = phase
		status := metav1.ConditionTrue
		if reason != petriv1.ReasonSucceeded {
			status = metav1.ConditionFalse
		}
		apimeta.SetStatusCondition(&e.Status.Conditions, metav1.Condition{Type: petriv1.ConditionReady, Status: status, Reason: reason, Message: msg})
		return e
	}
	sick := "Deployment web: Available: 0/1"
	for _, tc := range []struct {
		name      string
		env       *petriv1.EphemeralEnvironment
		unhealthy string
		want      bool
	}{
		{"Ready, running", at(petriv1.EnvironmentReady, petriv1.ReasonSucceeded, ""), "", false},
		{"Ready, a workload stopped", at(petriv1.EnvironmentReady, petriv1.ReasonSucceeded, ""), sick, true},
		{"Degraded, as said", at(petriv1.EnvironmentDegraded, petriv1.ReasonWorkloadsUnhealthy, sick), sick, false},
		{"Degraded, something else now", at(petriv1.EnvironmentDegraded, petriv1.ReasonWorkloadsUnhealthy, sick), "Deployment web: scaled to 0 replicas; its release asks for 1", true},
		{"Degraded, running again", at(petriv1.EnvironmentDegraded, petriv1.ReasonWorkloadsUnhealthy, sick), "", true},
		{"deploying: its passes judge", at(petriv1.EnvironmentDeploying, petriv1.ReasonDeployProgressing, ""), sick, false},
		{"asleep", at(petriv1.EnvironmentSleeping, petriv1.ReasonSleeping, ""), "Deployment web: scaled to 0 replicas; its release asks for 1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, judged(tc.env) && healthMoved(tc.env, tc.unhealthy))
		})
	}
}

// --workload-health=false leaves the workloads out of the operator's
// cache: nothing of them is listed or watched. On, each kind is cached in
// every namespace, the objects of a release only.
func TestWorkloadHealthFlagScopesTheCache(t *testing.T) {
	kinds := func(o Options) map[string]string {
		out := map[string]string{}
		for obj, by := range cacheOptions(o).ByObject {
			switch obj.(type) {
			case *appsv1.Deployment, *appsv1.StatefulSet, *appsv1.DaemonSet:
				_, all := by.Namespaces[""]
				assert.True(t, all, "%T in every namespace", obj)
				out[fmt.Sprintf("%T", obj)] = by.Label.String()
			}
		}
		return out
	}
	on, err := parseOptions()
	require.NoError(t, err)
	assert.True(t, on.WorkloadHealth, "on by default")
	assert.Equal(t, map[string]string{"*v1.DaemonSet": contract.LabelRelease, "*v1.Deployment": contract.LabelRelease, "*v1.StatefulSet": contract.LabelRelease}, kinds(on))
	off, err := parseOptions("--workload-health=false")
	require.NoError(t, err)
	assert.Empty(t, kinds(off))
}

// The releases' Jobs are cached apart from Petri's own, and only those:
// Petri's deploy Jobs (labelled managed-by) are not in that cache, and
// the manager's cache of them is not widened. A slimmed Job keeps its
// verdict.
func TestReleaseJobsAreNotPetris(t *testing.T) {
	sel := releaseJobs()
	assert.True(t, sel.Matches(labels.Set{contract.LabelRelease: "web"}))
	assert.False(t, sel.Matches(labels.Set{contract.LabelRelease: "web", petriv1.LabelManagedBy: petriv1.ManagedByOperator}))
	assert.False(t, sel.Matches(labels.Set{}))
	petris := 0
	for obj, by := range cacheOptions(DefaultOptions()).ByObject {
		if _, ok := obj.(*batchv1.Job); ok {
			petris++
			assert.Empty(t, by.Namespaces, "Petri's Jobs: its namespace only")
			assert.Equal(t, petriv1.LabelManagedBy+"="+petriv1.ManagedByOperator, by.Label.String())
		}
	}
	assert.Equal(t, 1, petris)

	failed := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate", Generation: 1, Labels: map[string]string{contract.LabelRelease: "web", "other": "x"}},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m"}}}}},
		Status: batchv1.JobStatus{Failed: 1, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}, {Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
		}},
	}
	want := health.Judge([]client.Object{failed.DeepCopy()}, nil)
	require.False(t, want.Healthy())
	out, err := slimWorkload(failed.DeepCopy())
	require.NoError(t, err)
	assert.Equal(t, want, health.Judge([]client.Object{out.(client.Object)}, nil))
	assert.Empty(t, out.(*batchv1.Job).Spec.Template.Spec.Containers)
}

// What the health watch remembers of an environment's workloads goes with
// the environment: once its teardown releases the finalizer, nothing of it
// is left (the memory would otherwise grow with every environment ever
// deleted).
func TestTeardownForgetsTheEnvironmentsWorkloads(t *testing.T) {
	env := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{
		Namespace: "petri-system", Name: "gone", UID: "uid-gone", Finalizers: []string{petriv1.Finalizer},
	}}
	r := &EphemeralEnvironmentReconciler{
		Client:    fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(env).Build(),
		workloads: &workloadWatch{},
	}
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "gone-ab12", Name: "web", Labels: map[string]string{contract.LabelRelease: "web"}}}
	r.workloads.seen.Missing(string(env.UID), map[string]string{"web": "deploy-web-1"}, []client.Object{web})
	require.True(t, r.workloads.seen.Remembers(string(env.UID)), "the watch remembers the deployed workload")

	require.NoError(t, r.teardowns().releaseFinalizer(context.Background(), env))
	assert.False(t, r.workloads.seen.Remembers(string(env.UID)), "nothing of the environment is remembered after its teardown")
}
