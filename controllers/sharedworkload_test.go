package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// recordDir is where provision and deprovision containers record the
// environment they saw. It lies outside /tmp, which every Job mounts.
func recordDir(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(cache, 0o755))
	dir, err := os.MkdirTemp(cache, "petri-sw-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func sharedWorkload(name, dir string) *petriv1.SharedWorkload {
	step := func(action string) *petriv1.ContainerTemplate {
		return &petriv1.ContainerTemplate{
			Image:   helperImage,
			Command: []string{"/petri-testhelper"},
			Args:    []string{"record", dir + "/$(PETRI_ENVIRONMENT)-" + action + ".env"},
		}
	}
	return &petriv1.SharedWorkload{
		ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name},
		Spec: petriv1.SharedWorkloadSpec{
			Chart: petriv1.ChartReference{Repository: imageCharts, Name: "greeter", Version: "0.1.0"},
			// Its pods run nowhere here (see component).
			Release:        noWait(),
			InstanceSecret: &petriv1.InstanceSecretSpec{Keys: []string{"ADMIN_PASSWORD"}, Length: 24},
			Binding: map[string]string{
				"DATABASE": "db_{{ .Hash }}",
				"HOST":     name + ".{{ .SharedNamespace }}.svc",
				"ENV_NAME": "{{ .Environment }}",
			},
			Provision:   step("provision"),
			Deprovision: step("deprovision"),
		},
	}
}

func boundEnv(name, sw string) *petriv1.EphemeralEnvironment {
	c := greeter("app")
	c.Uses = []string{sw}
	e := newEnv(name, c)
	e.Spec.SharedWorkloads = []string{sw}
	return e
}

func swReady(t *testing.T, name string) *petriv1.SharedWorkload {
	t.Helper()
	sw := &petriv1.SharedWorkload{}
	ok := eventually(90*time.Second, func() bool {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: name}, sw); err != nil {
			return false
		}
		return apimeta.IsStatusConditionTrue(sw.Status.Conditions, petriv1.ConditionReady) && sw.Status.ObservedGeneration == sw.Generation
	})
	require.True(t, ok, "shared workload %s never became ready: %+v", name, sw.Status)
	return sw
}

func readRecord(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	vars := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	return vars
}

func instanceSecret(t *testing.T, sw string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: mgmtNS, Name: sw + "-instance"}, s))
	return s
}

// Five environments bind, one after another: every deprovision sees
// exactly the credentials its provision saw, each has its own database, and
// the instance keys never change. (bindingCredentialsSurviveARestart is the
// same with the operator restarted between a bind and its teardown.)
func TestBindingCredentialsAreStableAcrossEnvironments(t *testing.T) {
	t.Parallel()
	first, dir := boundSharedWorkload(t, "pg")
	databases := map[string]bool{}
	for i := 1; i <= 5; i++ {
		db := bindAndTearDown(t, fmt.Sprintf("seq-%d", i), "pg", dir, false)
		assert.False(t, databases[db], "each environment has its own database")
		databases[db] = true
	}
	assertInstanceSecretUnchanged(t, "pg", first)
}

// An environment bound before an operator restart and deleted after it
// deprovisions with the credentials its provision saw, and the instance
// keys are not written again.
func bindingCredentialsSurviveARestart(t *testing.T) {
	first, dir := boundSharedWorkload(t, "pg-restart")
	bindAndTearDown(t, "restarted-bind", "pg-restart", dir, true)
	assertInstanceSecretUnchanged(t, "pg-restart", first)
}

// boundSharedWorkload creates a shared workload whose deploy Jobs are the
// stand-in's (its release is not what these tests are about) and returns
// its instance Secret once it is Ready, and its steps' record directory.
func boundSharedWorkload(t *testing.T, sw string) (*corev1.Secret, string) {
	t.Helper()
	dir := recordDir(t)
	standIn(t, sw, succeedAll)
	require.NoError(t, env.Client.Create(context.Background(), sharedWorkload(sw, dir)))
	swReady(t, sw)
	first := instanceSecret(t, sw)
	require.Len(t, string(first.Data["ADMIN_PASSWORD"]), 24)
	return first, dir
}

// bindAndTearDown creates an environment bound to sw, checks its binding
// (restarting the operator then, with restart) and deletes it, and checks
// that its deprovision saw what its provision saw; it returns its
// database.
func bindAndTearDown(t *testing.T, name, sw, dir string, restart bool) string {
	t.Helper()
	ctx := context.Background()
	je := watchJobs(t, name)
	// Its deploys are not what this is about (the bind Jobs, which stage
	// the credentials, run the deployer).
	standIn(t, name, succeedAll)
	require.NoError(t, env.Client.Create(ctx, boundEnv(name, sw)))
	e := waitFor(t, name, "ready", ready)
	assert.True(t, conditionIs(e, petriv1.ConditionSharedWorkloadsBound, metav1.ConditionTrue, petriv1.ReasonBindSucceeded))

	// The component that uses the binding started after provisioning.
	_, provisioned := je.get("provision/" + sw + "/1")
	appCreated, _ := je.get("deploy/app/1")
	require.NotZero(t, provisioned)
	assert.Greater(t, appCreated, provisioned, "app starts only after its provision succeeded")

	// The binding Secret in the workload namespace: the environment's
	// keys, not the instance's.
	bs := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: e.Status.TargetNamespace, Name: "petri-binding-" + sw}, bs))
	assert.NotContains(t, bs.Data, "ADMIN_PASSWORD")
	assert.Equal(t, name, string(bs.Data["ENV_NAME"]))
	assert.Equal(t, sw+"."+sharedNS+".svc", string(bs.Data["HOST"]))

	if restart {
		restartOperator(t)
	}
	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)

	prov := readRecord(t, filepath.Join(dir, name+"-provision.env"))
	deprov := readRecord(t, filepath.Join(dir, name+"-deprovision.env"))
	for _, k := range []string{"ADMIN_PASSWORD", "DATABASE", "HOST", "ENV_NAME"} {
		assert.Equal(t, prov[k], deprov[k], "%s: deprovision saw the %s provision saw", name, k)
	}
	assert.Equal(t, string(instanceSecret(t, sw).Data["ADMIN_PASSWORD"]), prov["ADMIN_PASSWORD"])
	assert.Equal(t, string(bs.Data["DATABASE"]), prov["DATABASE"])
	return prov["DATABASE"]
}

// assertInstanceSecretUnchanged checks that sw's instance Secret is the one
// first was: never written again.
func assertInstanceSecretUnchanged(t *testing.T, sw string, first *corev1.Secret) {
	t.Helper()
	last := instanceSecret(t, sw)
	assert.Equal(t, first.UID, last.UID)
	assert.Equal(t, first.ResourceVersion, last.ResourceVersion, "the instance Secret was never written again")
	assert.Equal(t, first.Data, last.Data)
}

// Two environments bound at the same time have their own binding keys; their
// provision steps share the instance keys.
func TestConcurrentBindingsShareInstanceKeys(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "pair-a", succeedAll)
	standIn(t, "pair-b", succeedAll)
	standIn(t, "cache-sw", succeedAll)
	ctx := context.Background()
	dir := recordDir(t)
	require.NoError(t, env.Client.Create(ctx, sharedWorkload("cache-sw", dir)))
	require.NoError(t, env.Client.Create(ctx, boundEnv("pair-a", "cache-sw")))
	require.NoError(t, env.Client.Create(ctx, boundEnv("pair-b", "cache-sw")))
	a := waitFor(t, "pair-a", "ready", ready)
	b := waitFor(t, "pair-b", "ready", ready)
	sa, sb := &corev1.Secret{}, &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: a.Status.TargetNamespace, Name: "petri-binding-cache-sw"}, sa))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: b.Status.TargetNamespace, Name: "petri-binding-cache-sw"}, sb))
	assert.NotContains(t, sa.Data, "ADMIN_PASSWORD")
	assert.NotContains(t, sb.Data, "ADMIN_PASSWORD")
	pa := readRecord(t, filepath.Join(dir, "pair-a-provision.env"))
	pb := readRecord(t, filepath.Join(dir, "pair-b-provision.env"))
	assert.Equal(t, string(instanceSecret(t, "cache-sw").Data["ADMIN_PASSWORD"]), pa["ADMIN_PASSWORD"])
	assert.Equal(t, pa["ADMIN_PASSWORD"], pb["ADMIN_PASSWORD"])
	assert.NotEqual(t, sa.Data["DATABASE"], sb.Data["DATABASE"])
	assert.Equal(t, "pair-a", string(sa.Data["ENV_NAME"]))
	assert.Equal(t, "pair-b", string(sb.Data["ENV_NAME"]))
	sw := swReady(t, "cache-sw")
	assert.Equal(t, int32(2), sw.Status.BoundEnvironments)
}

// Ten environments created together with their shared workload race for its
// instance Secret: one is written, and every provision step has its values.
func TestConcurrentFirstUseWritesOneInstanceSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := recordDir(t)
	var wg sync.WaitGroup
	errs := make(chan error, 11)
	wg.Add(11)
	go func() { defer wg.Done(); errs <- env.Client.Create(ctx, sharedWorkload("race", dir)) }()
	for i := range 10 {
		go func() { defer wg.Done(); errs <- env.Client.Create(ctx, boundEnv(fmt.Sprintf("race-%d", i), "race")) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var passwords []string
	for i := range 10 {
		waitFor(t, fmt.Sprintf("race-%d", i), "ready", ready)
		passwords = append(passwords, readRecord(t, filepath.Join(dir, fmt.Sprintf("race-%d-provision.env", i)))["ADMIN_PASSWORD"])
	}
	inst := instanceSecret(t, "race")
	for i, p := range passwords {
		assert.Equal(t, string(inst.Data["ADMIN_PASSWORD"]), p, "environment race-%d carries the one instance value", i)
	}
	var all corev1.SecretList
	require.NoError(t, env.Client.List(ctx, &all, client.InNamespace(mgmtNS), client.MatchingLabels{"petri.dev/shared-workload": "race"}))
	instances := 0
	for _, s := range all.Items {
		if metav1.IsControlledBy(&s, &petriv1.SharedWorkload{ObjectMeta: metav1.ObjectMeta{UID: inst.OwnerReferences[0].UID}}) && s.Data["ADMIN_PASSWORD"] != nil {
			instances++
		}
	}
	assert.Equal(t, 1, instances, "one instance Secret")
}

// Deleting a shared workload that environments use is held, naming them; it
// proceeds once they are gone.
func TestSharedWorkloadDeletionIsHeldWhileInUse(t *testing.T) {
	t.Parallel()
	// Its deployer Jobs are not what this is about: the stand-in's succeed
	// at once (succeedAll).
	standIn(t, "held-a", succeedAll)
	standIn(t, "held-b", succeedAll)
	standIn(t, "held", succeedAll)
	ctx := context.Background()
	dir := recordDir(t)
	sw := sharedWorkload("held", dir)
	require.NoError(t, env.Client.Create(ctx, sw))
	require.NoError(t, env.Client.Create(ctx, boundEnv("held-a", "held")))
	require.NoError(t, env.Client.Create(ctx, boundEnv("held-b", "held")))
	a := waitFor(t, "held-a", "ready", ready)
	b := waitFor(t, "held-b", "ready", ready)

	require.NoError(t, env.Client.Delete(ctx, sw))
	require.True(t, eventually(60*time.Second, func() bool {
		cur := &petriv1.SharedWorkload{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(sw), cur) != nil {
			return false
		}
		c := apimeta.FindStatusCondition(cur.Status.Conditions, petriv1.ConditionReady)
		return c != nil && c.Reason == petriv1.ReasonInUse && strings.Contains(c.Message, "held-a, held-b")
	}), "deletion held with the environments named")

	require.NoError(t, env.Client.Delete(ctx, a))
	require.NoError(t, env.Client.Delete(ctx, b))
	waitGone(t, a)
	waitGone(t, b)
	waitGone(t, sw)
	// Its release was undeployed from the shared namespace.
	var rel corev1.SecretList
	require.NoError(t, env.Client.List(ctx, &rel, client.InNamespace(sharedNS), client.MatchingLabels{"owner": "helm", "name": "held"}))
	assert.Empty(t, rel.Items)
}

// A shared workload whose undeploy fails is retried with backoff, a new Job
// per attempt, and reported; once the cause is gone, the next attempt
// undeploys it and the deletion completes.
func TestFailedSharedWorkloadUndeployIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw := sharedWorkload("retry-sw", recordDir(t))
	require.NoError(t, env.Client.Create(ctx, sw))
	swReady(t, "retry-sw")

	// Corrupt the release record: every undeploy Job fails to read it.
	var records corev1.SecretList
	require.NoError(t, env.Client.List(ctx, &records, client.InNamespace(sharedNS), client.MatchingLabels{"owner": "helm", "name": "retry-sw"}))
	require.Len(t, records.Items, 1)
	record := &records.Items[0]
	original := record.Data["release"]
	record.Data["release"] = []byte("not a release")
	require.NoError(t, env.Client.Update(ctx, record))

	require.NoError(t, env.Client.Delete(ctx, sw))
	cur := &petriv1.SharedWorkload{}
	retried := eventually(60*time.Second, func() bool {
		if env.Client.Get(ctx, client.ObjectKeyFromObject(sw), cur) != nil || cur.Status.Release == nil {
			return false
		}
		c := apimeta.FindStatusCondition(cur.Status.Conditions, petriv1.ConditionReady)
		return cur.Status.Release.Attempt >= 3 && c != nil && c.Reason == petriv1.ReasonTeardownFailed
	})
	require.True(t, retried, "undeploy retried: %+v", cur.Status)
	msg := apimeta.FindStatusCondition(cur.Status.Conditions, petriv1.ConditionReady).Message
	assert.Contains(t, msg, "undeploy failed (attempt")
	assert.NotEmpty(t, cur.Status.Release.LastError)
	assert.Contains(t, cur.Finalizers, petriv1.Finalizer, "held while its undeploy fails")
	var list batchv1.JobList
	require.NoError(t, env.Client.List(ctx, &list, client.InNamespace(mgmtNS), client.MatchingLabels{"petri.dev/shared-workload": "retry-sw", contract.LabelAction: contract.ActionUndeploy}))
	assert.GreaterOrEqual(t, len(list.Items), 3, "one Job per attempt")

	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(record), record))
	record.Data["release"] = original
	require.NoError(t, env.Client.Update(ctx, record))
	waitGone(t, sw)
	var rel corev1.SecretList
	require.NoError(t, env.Client.List(ctx, &rel, client.InNamespace(sharedNS), client.MatchingLabels{"owner": "helm", "name": "retry-sw"}))
	assert.Empty(t, rel.Items, "the release was undeployed")
}

// A shared workload's deploy Job deleted while its pod runs (orphaned, so
// the pod goes on to its end) holds the release: the next deploy Job starts
// only once that pod has ended, as an environment's does
// (TestPodOfADeletedJobHoldsTheNextJob).
func TestPodOfADeletedJobHoldsTheSharedWorkloadsNextJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sw := sharedWorkload("orphaned-sw", recordDir(t))
	// Its first deploy Job runs until the test lets it end.
	first := make(chan struct{})
	var once sync.Once
	finish := func() { once.Do(func() { close(first) }) }
	t.Cleanup(finish)
	var deploys sync.Map
	standIn(t, sw.Name, func(job standInJob) standInReply {
		if _, again := deploys.LoadOrStore(job.Action, true); !again && job.Action == contract.ActionDeploy {
			return blockUntil(job, first, succeedAll)
		}
		return succeedAll(job)
	})
	require.NoError(t, env.Client.Create(ctx, sw))
	cur := &petriv1.SharedWorkload{}
	require.True(t, eventually(30*time.Second, func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(sw), cur) == nil && cur.Status.Release != nil &&
			cur.Status.Release.Phase == petriv1.ComponentDeploying && cur.Status.Release.Job != ""
	}), "deploying: %+v", cur.Status)
	job := runningJob(t, cur.Status.Release.Job)
	waiting := func() bool {
		s := getSW(sw.Name)
		if s == nil {
			return false
		}
		for _, c := range s.Status.Conditions {
			if strings.Contains(c.Message, "waiting for job "+job.Name) {
				return true
			}
		}
		return false
	}
	assertNextJobWaitsForOrphanedPod(t, job, client.MatchingLabels{"petri.dev/shared-workload": "orphaned-sw", contract.LabelAction: contract.ActionDeploy}, waiting, finish)

	require.NoError(t, env.Client.Delete(ctx, sw))
	waitGone(t, sw)
}
