package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
)

func bindingNamed(e *petriv1.EphemeralEnvironment, name string) *petriv1.BindingStatus {
	for i := range e.Status.SharedWorkloads {
		if e.Status.SharedWorkloads[i].Name == name {
			return &e.Status.SharedWorkloads[i]
		}
	}
	return nil
}

// waitFileStep is a provision or deprovision step that runs until gate exists.
func waitFileStep(gate string) *petriv1.ContainerTemplate {
	return &petriv1.ContainerTemplate{Image: helperImage, Command: []string{"/petri-testhelper"}, Args: []string{"wait-file", gate}}
}

func openGate(t *testing.T, gate string) {
	t.Helper()
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
}

// stepJobs lists an environment's Jobs of one action.
func stepJobs(t *testing.T, uid types.UID, action string) []batchv1.Job {
	t.Helper()
	var list batchv1.JobList
	require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironmentUID: string(uid), jobs.LabelAction: action}))
	return list.Items
}

// runningJob waits until the Job exists and its pod runs, and returns it.
func runningJob(t *testing.T, name string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	require.True(t, eventually(30*time.Second, func() bool {
		if env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, job) != nil {
			return false
		}
		var pods corev1.PodList
		err := env.Client.List(context.Background(), &pods, client.InNamespace(mgmtNS), client.MatchingLabels{batchv1.JobNameLabel: name})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning
	}), "job %s runs", name)
	return job
}

// deleteJob deletes a Job the way a person or the TTL controller does and
// waits until it is gone.
func deleteJob(t *testing.T, job *batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	require.True(t, eventually(30*time.Second, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}))
	}), "job %s is gone", job.Name)
}

// A provision Job that disappears while it runs is started again instead of
// being waited for forever.
func TestBindingGoesOnWhenAProvisionJobIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := recordDir(t)
	gate := filepath.Join(dir, "provision-may-finish")
	sw := sharedWorkload("lost-prov-sw", dir)
	sw.Spec.Provision = waitFileStep(gate)
	require.NoError(t, env.Client.Create(ctx, sw))
	require.NoError(t, env.Client.Create(ctx, boundEnv("lost-prov", "lost-prov-sw")))
	var provision []batchv1.Job
	e := waitFor(t, "lost-prov", "provisioning", func(e *petriv1.EphemeralEnvironment) bool {
		provision = stepJobs(t, e.UID, jobs.ActionProvision)
		return len(provision) == 1
	})
	first := runningJob(t, provision[0].Name)
	deleteJob(t, first)

	require.True(t, eventually(60*time.Second, func() bool {
		for _, j := range stepJobs(t, e.UID, jobs.ActionProvision) {
			if j.UID != first.UID {
				return true
			}
		}
		return false
	}), "a new provision Job starts: %s", describe(current("lost-prov")))
	openGate(t, gate)
	waitFor(t, "lost-prov", "ready", ready)
}

// A deprovision Job that disappears while it runs does not hold the teardown
// forever: the next attempt starts and finishes the job.
func TestTeardownGoesOnWhenADeprovisionJobIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := recordDir(t)
	gate := filepath.Join(dir, "deprovision-may-finish")
	sw := sharedWorkload("lost-deprov-sw", dir)
	sw.Spec.Deprovision = waitFileStep(gate)
	require.NoError(t, env.Client.Create(ctx, sw))
	require.NoError(t, env.Client.Create(ctx, boundEnv("lost-deprov", "lost-deprov-sw")))
	e := waitFor(t, "lost-deprov", "ready", ready)

	require.NoError(t, env.Client.Delete(ctx, e))
	e = waitFor(t, "lost-deprov", "deprovisioning", func(e *petriv1.EphemeralEnvironment) bool {
		bs := bindingNamed(e, "lost-deprov-sw")
		return bs != nil && bs.Phase == petriv1.ComponentUndeploying && bs.Job != ""
	})
	first := bindingNamed(e, "lost-deprov-sw").Job
	deleteJob(t, runningJob(t, first))

	e = waitFor(t, "lost-deprov", "a new deprovision attempt", func(e *petriv1.EphemeralEnvironment) bool {
		bs := bindingNamed(e, "lost-deprov-sw")
		return bs != nil && bs.Phase == petriv1.ComponentUndeploying && bs.Job != first
	})
	assert.Equal(t, int32(2), bindingNamed(e, "lost-deprov-sw").Attempt)
	openGate(t, gate)
	waitGone(t, e)
}
