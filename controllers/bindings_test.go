package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
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
	require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(mgmtNS), client.MatchingLabels{petriv1.LabelEnvironmentUID: string(uid), contract.LabelAction: action}))
	return list.Items
}

// jobsOf describes an environment's Jobs and its events, for failure messages.
func jobsOf(t *testing.T, uid types.UID) string {
	t.Helper()
	var b strings.Builder
	for _, action := range []string{contract.ActionDeploy, contract.ActionUndeploy, contract.ActionBind, contract.ActionProvision, contract.ActionDeprovision} {
		for _, j := range stepJobs(t, uid, action) {
			fmt.Fprintf(&b, " [%s active=%d", j.Name, j.Status.Active)
			for _, c := range j.Status.Conditions {
				fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
			}
			b.WriteString("]")
		}
	}
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(mgmtNS)); err == nil {
		for _, ev := range events.Items {
			if ev.InvolvedObject.UID == uid {
				fmt.Fprintf(&b, " {%s %s: %s}", ev.Type, ev.Reason, ev.Message)
			}
		}
	}
	return b.String()
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
	cur := &batchv1.Job{}
	var err error
	require.True(t, eventually(30*time.Second, func() bool {
		err = env.Client.Get(ctx, client.ObjectKeyFromObject(job), cur)
		return apierrors.IsNotFound(err)
	}), "job %s is gone: %v; finalizers %v, deletion %v, uid %s (deleted %s)", job.Name, err, cur.Finalizers, cur.DeletionTimestamp, cur.UID, job.UID)
}

// A shared workload taken out of spec.sharedWorkloads is deprovisioned before
// its binding is forgotten; until then the environment still counts as its
// user (its deletion is held) and is not Ready.
func TestRemovedSharedWorkloadIsDeprovisioned(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "drop", succeedAll)
	standIn(t, "drop-sw", succeedAll)
	ctx := context.Background()
	dir := recordDir(t)
	gate := filepath.Join(dir, "deprovision-may-finish")
	sw := sharedWorkload("drop-sw", dir)
	sw.Spec.Deprovision = waitFileStep(gate)
	require.NoError(t, env.Client.Create(ctx, sw))
	require.NoError(t, env.Client.Create(ctx, boundEnv("drop", "drop-sw")))
	e := waitFor(t, "drop", "ready", ready)
	require.Equal(t, petriv1.ComponentDeployed, bindingNamed(e, "drop-sw").Phase)

	updateEnv(t, "drop", func(e *petriv1.EphemeralEnvironment) {
		e.Spec.SharedWorkloads, e.Spec.Components[0].Uses = nil, nil
	})
	deprovisioning := func(e *petriv1.EphemeralEnvironment) bool {
		bs := bindingNamed(e, "drop-sw")
		return bs != nil && bs.Phase == petriv1.ComponentUndeploying && bs.Job != ""
	}
	e = waitFor(t, "drop", "deprovisioning the removed binding (or wrongly done)", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Generation == 2 && (deprovisioning(e) || ready(e))
	})
	require.True(t, deprovisioning(e), "the removed binding is deprovisioned: %s", describe(e))
	assert.False(t, ready(e), "not Ready while a removed binding is being deprovisioned")
	job := bindingNamed(e, "drop-sw").Job

	// The environment still uses the shared workload: its deletion is held.
	require.NoError(t, env.Client.Delete(ctx, sw))
	require.True(t, eventually(60*time.Second, func() bool {
		cur := &petriv1.SharedWorkload{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(sw), cur) != nil {
			return false
		}
		c := apimeta.FindStatusCondition(cur.Status.Conditions, petriv1.ConditionReady)
		return c != nil && c.Reason == petriv1.ReasonInUse && cur.Status.BoundEnvironments == 1
	}), "deletion held while the binding is deprovisioned")

	openGate(t, gate)
	e = waitFor(t, "drop", "ready without the binding", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && len(e.Status.SharedWorkloads) == 0
	})
	assert.Nil(t, apimeta.FindStatusCondition(e.Status.Conditions, petriv1.ConditionSharedWorkloadsBound))
	done := &batchv1.Job{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: mgmtNS, Name: job}, done))
	assert.NotNil(t, done.Status.CompletionTime, "deprovision job %s succeeded", job)
	waitGone(t, sw)
}

// A shared workload removed and added back is provisioned again (its database
// was dropped by the deprovision), and deprovisioned again at teardown.
func TestSharedWorkloadAddedBackIsProvisionedAgain(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "again", succeedAll)
	standIn(t, "again-sw", succeedAll)
	ctx := context.Background()
	dir := recordDir(t)
	require.NoError(t, env.Client.Create(ctx, sharedWorkload("again-sw", dir)))
	require.NoError(t, env.Client.Create(ctx, boundEnv("again", "again-sw")))
	e := waitFor(t, "again", "ready", ready)
	provisioned := filepath.Join(dir, "again-provision.env")
	deprovisioned := filepath.Join(dir, "again-deprovision.env")
	require.FileExists(t, provisioned)

	updateEnv(t, "again", func(e *petriv1.EphemeralEnvironment) {
		e.Spec.SharedWorkloads, e.Spec.Components[0].Uses = nil, nil
	})
	e = waitFor(t, "again", "ready without the binding", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Generation == 2 && ready(e) && len(e.Status.SharedWorkloads) == 0
	})
	require.FileExists(t, deprovisioned, "removal deprovisioned the binding")
	assert.Equal(t, readRecord(t, provisioned)["DATABASE"], readRecord(t, deprovisioned)["DATABASE"])
	require.NoError(t, os.Remove(provisioned))
	require.NoError(t, os.Remove(deprovisioned))

	updateEnv(t, "again", func(e *petriv1.EphemeralEnvironment) {
		e.Spec.SharedWorkloads, e.Spec.Components[0].Uses = []string{"again-sw"}, []string{"again-sw"}
	})
	e = waitFor(t, "again", "ready with the binding again", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Generation == 3 && ready(e)
	})
	require.FileExists(t, provisioned, "added back: provisioned again")
	assert.Len(t, stepJobs(t, e.UID, contract.ActionProvision), 2, "a provision Job per binding")

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
	require.FileExists(t, deprovisioned, "teardown deprovisioned it again")
}

// A provision Job that disappears while it runs is started again instead of
// being waited for forever.
func TestBindingGoesOnWhenAProvisionJobIsGone(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "lost-prov", succeedAll)
	standIn(t, "lost-prov-sw", succeedAll)
	ctx := context.Background()
	dir := recordDir(t)
	gate := filepath.Join(dir, "provision-may-finish")
	sw := sharedWorkload("lost-prov-sw", dir)
	sw.Spec.Provision = waitFileStep(gate)
	require.NoError(t, env.Client.Create(ctx, sw))
	require.NoError(t, env.Client.Create(ctx, boundEnv("lost-prov", "lost-prov-sw")))
	var provision []batchv1.Job
	e := waitFor(t, "lost-prov", "provisioning", func(e *petriv1.EphemeralEnvironment) bool {
		provision = stepJobs(t, e.UID, contract.ActionProvision)
		return len(provision) == 1
	})
	first := runningJob(t, provision[0].Name)
	deleteJob(t, first)

	require.True(t, eventually(60*time.Second, func() bool {
		for _, j := range stepJobs(t, e.UID, contract.ActionProvision) {
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
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "lost-deprov", succeedAll)
	standIn(t, "lost-deprov-sw", succeedAll)
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
