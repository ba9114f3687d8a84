package controllers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/petri-dev/petri/controllers"
)

// TestCachedJobsAndPodsAreSlim checks that the cache keeps of Jobs and pods
// what the operator reads (labels, status, the container's termination
// message) and drops the pod template and the pod spec.
func TestCachedJobsAndPodsAreSlim(t *testing.T) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "deploy-web", Labels: map[string]string{"petri.dev/action": "deploy"}},
		Spec: batchv1.JobSpec{BackoffLimit: new(int32), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "petri.dev/deployer", Args: []string{"deploy", "--release", "web"}}},
		}}},
		Status: batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	out, err := controllers.SlimCachedJob(job)
	require.NoError(t, err)
	slim := out.(*batchv1.Job)
	assert.Empty(t, slim.Spec.Template.Spec.Containers)
	assert.NotNil(t, slim.Spec.BackoffLimit)
	assert.Equal(t, "deploy", slim.Labels["petri.dev/action"])
	assert.Equal(t, int32(1), slim.Status.Succeeded)
	assert.Len(t, slim.Status.Conditions, 1)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "deploy-web-x", Labels: map[string]string{batchv1.JobNameLabel: "deploy-web"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "main", Image: "petri.dev/deployer"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "Deployed: revision 1"}},
		}}},
	}
	out, err = controllers.SlimCachedPod(pod)
	require.NoError(t, err)
	sp := out.(*corev1.Pod)
	assert.Empty(t, sp.Spec.Containers)
	assert.Equal(t, "node-1", sp.Spec.NodeName, "the node stays: a pod on a lost node holds no release")
	assert.Equal(t, "deploy-web", sp.Labels[batchv1.JobNameLabel])
	assert.Equal(t, "Deployed: revision 1", sp.Status.ContainerStatuses[0].State.Terminated.Message)
}

// TestJobPodsUsesTheIndex checks that a Job's pods are found through the
// pod index where it exists (the cache) and by label where it does not
// (the API server refuses the unknown field).
func TestJobPodsUsesTheIndex(t *testing.T) {
	ctx := context.Background()
	pods := []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "petri-system", Name: "a-1", Labels: map[string]string{batchv1.JobNameLabel: "a"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "petri-system", Name: "a-2", Labels: map[string]string{batchv1.JobNameLabel: "a"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "petri-system", Name: "b-1", Labels: map[string]string{batchv1.JobNameLabel: "b"}}},
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "petri-system", Name: "a"}}

	// The index is looked up, not the labels: a pod indexed under the Job
	// whose label says otherwise is found only through the index.
	indexed := fake.NewClientBuilder().WithObjects(pods...).WithIndex(&corev1.Pod{}, controllers.IndexJobPods, func(o client.Object) []string {
		if o.GetName() == "b-1" {
			return []string{"a"}
		}
		return []string{o.GetLabels()[batchv1.JobNameLabel]}
	}).Build()
	got, err := controllers.JobPods(ctx, indexed, job)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"a-1", "a-2", "b-1"}, names(got))

	// Without the index: by label.
	plain := fake.NewClientBuilder().WithObjects(pods...).Build()
	got, err = controllers.JobPods(ctx, plain, job)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"a-1", "a-2"}, names(got))

	// The production indexer indexes by the Job name label.
	var idx fakeIndexer
	require.NoError(t, controllers.IndexPodsByJob(ctx, &idx))
	assert.Equal(t, []string{"a"}, idx.fn(pods[0]))
	assert.Nil(t, idx.fn(&corev1.Pod{}))
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

type fakeIndexer struct{ fn client.IndexerFunc }

func (f *fakeIndexer) IndexField(_ context.Context, _ client.Object, _ string, fn client.IndexerFunc) error {
	f.fn = fn
	return nil
}
