package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/jobs"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// annotate sets annotations on an environment the way kubectl annotate
// does: a merge patch as the cluster administrator.
func annotate(t *testing.T, name string, kv map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
	require.NoError(t, err)
	e := &petriv1.EphemeralEnvironment{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: name}}
	require.NoError(t, env.Client.Patch(context.Background(), e, client.RawPatch(types.MergePatchType, patch)))
}

// requestNow is a request annotation's value for this moment.
func requestNow() string { return testClock.Now().UTC().Format(time.RFC3339Nano) }

func asleep(e *petriv1.EphemeralEnvironment) bool {
	return e.Status.Phase == petriv1.EnvironmentSleeping && e.Status.Sleep != nil && e.Status.Sleep.Asleep &&
		e.Status.ObservedGeneration == e.Generation &&
		conditionIs(e, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonSleeping) &&
		conditionIs(e, petriv1.ConditionReconciling, metav1.ConditionFalse, petriv1.ReasonSleeping)
}

func awake(e *petriv1.EphemeralEnvironment) bool {
	return ready(e) && e.Status.Phase == petriv1.EnvironmentReady && e.Status.Sleep != nil && !e.Status.Sleep.Asleep
}

// replicas reads each Deployment of ns as "replicas/recorded count" ("-"
// when there is no record).
func replicas(t *testing.T, ns string) map[string]string {
	t.Helper()
	var ds appsv1.DeploymentList
	require.NoError(t, env.Client.List(context.Background(), &ds, client.InNamespace(ns)))
	out := map[string]string{}
	for _, d := range ds.Items {
		rec, ok := d.Annotations[petriv1.AnnotationReplicasBeforeSleep]
		if !ok {
			rec = "-"
		}
		out[d.Name] = fmt.Sprintf("%d/%s", *d.Spec.Replicas, rec)
	}
	return out
}

// actionJobs lists the environment's Jobs of one action, oldest first.
func actionJobs(t *testing.T, envName, action string) []batchv1.Job {
	t.Helper()
	var list batchv1.JobList
	require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(mgmtNS),
		client.MatchingLabels{petriv1.LabelEnvironment: envName, contract.LabelAction: action}))
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) ||
			list.Items[i].CreationTimestamp.Equal(&list.Items[j].CreationTimestamp) && list.Items[i].Name < list.Items[j].Name
	})
	return list.Items
}

// eventReasons lists the reasons of the Events on an environment.
func eventReasons(t *testing.T, e *petriv1.EphemeralEnvironment) map[string]int {
	t.Helper()
	var events corev1.EventList
	require.NoError(t, env.Client.List(context.Background(), &events, client.InNamespace(mgmtNS)))
	out := map[string]int{}
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == e.UID {
			out[ev.Reason]++
		}
	}
	return out
}

// exampleApp is a component of the example chart at the given replicas.
func exampleApp(name string, n int) petriv1.Component {
	c := component(name, imageCharts, "example-app", "0.1.0")
	c.Values = jsonValues(map[string]any{"replicas": n})
	return c
}

// A sleep request scales the example chart's Deployments to zero through a
// Job running as the environment's deployer identity, with their counts
// recorded on them; a wake request (set as kubectl annotate sets it)
// restores exactly those counts. Neither deploys anything nor makes the
// operator write in the workload namespace.
func TestSleepAndWakeRestoreTheReplicasExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "sleepy"
	e := newEnv(name, exampleApp("web", 2), greeter("api"))
	require.NoError(t, env.Client.Create(ctx, e))
	first := waitFor(t, name, "Ready", ready)
	ns := first.Status.TargetNamespace
	require.Equal(t, map[string]string{"web": "2/-", "api-greeter": "1/-"}, replicas(t, ns))
	releases := helmReleases(t, ns)
	deploys := deployJobs(t, name)
	_, mark := operatorWritesSince(0, "")

	requested := requestNow()
	start := testClock.Now()
	annotate(t, name, map[string]string{petriv1.AnnotationSleepRequested: requested})
	slept := waitFor(t, name, "asleep", asleep)
	t.Logf("sleep request to asleep: %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, map[string]string{"web": "0/2", "api-greeter": "0/1"}, replicas(t, ns))
	assert.Equal(t, requested, slept.Status.Sleep.SleepRequested)
	assert.Equal(t, petriv1.SleepActionSleep, slept.Status.Sleep.Action)
	assert.NotNil(t, slept.Status.Sleep.Since)
	assert.Nil(t, apimeta.FindStatusCondition(slept.Status.Conditions, petriv1.ConditionStalled))
	assert.Contains(t, apimeta.FindStatusCondition(slept.Status.Conditions, petriv1.ConditionReady).Message, "asleep since ")

	// The sleep Job runs the deployer image as the environment's deployer
	// identity.
	sleeps := actionJobs(t, name, contract.ActionSleep)
	require.Len(t, sleeps, 1)
	assert.Equal(t, slept.Status.Sleep.Job, sleeps[0].Name)
	pod := sleeps[0].Spec.Template.Spec
	assert.Equal(t, naming.DeployerServiceAccount(name), pod.ServiceAccountName)
	assert.Equal(t, deployerImage+":dev", pod.Containers[0].Image)
	assert.Equal(t, []string{"sleep", "--namespace", ns, "--termination-log", jobs.TerminationLogPath}, pod.Containers[0].Args)

	// Woken the way kubectl annotate ee NAME petri.dev/wake-requested=$(date -u +%FT%TZ)
	// does (whole seconds, later than the sleep request).
	wakeAt := testClock.Now().UTC().Add(time.Second).Truncate(time.Second).Format(time.RFC3339)
	start = testClock.Now()
	annotate(t, name, map[string]string{petriv1.AnnotationWakeRequested: wakeAt})
	woken := waitFor(t, name, "awake", awake)
	t.Logf("wake request to Ready: %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, map[string]string{"web": "2/-", "api-greeter": "1/-"}, replicas(t, ns), "exactly the counts before the sleep")
	assert.Equal(t, wakeAt, woken.Status.Sleep.WakeRequested)
	assert.Equal(t, petriv1.SleepActionWake, woken.Status.Sleep.Action)
	wakes := actionJobs(t, name, contract.ActionWake)
	require.Len(t, wakes, 1)
	assert.Equal(t, []string{"wake", "--namespace", ns, "--termination-log", jobs.TerminationLogPath}, wakes[0].Spec.Template.Spec.Containers[0].Args)
	assert.Equal(t, naming.DeployerServiceAccount(name), wakes[0].Spec.Template.Spec.ServiceAccountName)

	// Sleep and wake deploy nothing: one sleep Job, the same deploy Jobs,
	// the same Helm revisions.
	assert.Len(t, actionJobs(t, name, contract.ActionSleep), 1)
	assert.Equal(t, deploys, deployJobs(t, name))
	assert.Equal(t, releases, helmReleases(t, ns))
	// The operator wrote nothing in the workload namespace; the Jobs did.
	written, _ := operatorWritesSince(mark, "/namespaces/"+ns+"/")
	assert.Empty(t, written)
	var web appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &web))
	var managers []string
	for _, f := range web.ManagedFields {
		managers = append(managers, f.Manager)
	}
	assert.Contains(t, managers, "petri-deployer", "the deployer's own writes")
	reasons := eventReasons(t, woken)
	assert.Positive(t, reasons[petriv1.ReasonSleeping], "events: %v", reasons)
	assert.Positive(t, reasons[petriv1.ReasonWaking], "events: %v", reasons)

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
}

// A sleep request older than the current generation's deploy is stale: the
// environment deploys and stays awake. (The pass that finds the deploy final
// is the one that would start the sleep Job, in the same status write that
// makes the environment Ready.)
func TestASleepRequestBeforeTheDeployIsStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "stale-sleep"
	e := newEnv(name, greeter("web"))
	e.Annotations = map[string]string{petriv1.AnnotationSleepRequested: requestNow()}
	require.NoError(t, env.Client.Create(ctx, e))
	got := waitFor(t, name, "Ready", ready)
	assert.Nil(t, got.Status.Sleep)
	assert.Empty(t, actionJobs(t, name, contract.ActionSleep))
	assert.Equal(t, map[string]string{"web-greeter": "1/-"}, replicas(t, got.Status.TargetNamespace))

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
}

// A spec change (a push) wakes a sleeping environment before it deploys the
// new generation, and a redeploy wakes it too; both end Ready and awake.
func TestANewGenerationOrARedeployWakesTheEnvironment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "sleep-push"
	e := newEnv(name, exampleApp("web", 2))
	require.NoError(t, env.Client.Create(ctx, e))
	first := waitFor(t, name, "Ready", ready)
	ns := first.Status.TargetNamespace
	annotate(t, name, map[string]string{petriv1.AnnotationSleepRequested: requestNow()})
	waitFor(t, name, "asleep", asleep)
	require.Equal(t, map[string]string{"web": "0/2"}, replicas(t, ns))

	cur := get(t, name)
	cur.Spec.Components[0].Values = jsonValues(map[string]any{"replicas": 3, "message": "pushed"})
	require.NoError(t, env.Client.Update(ctx, cur))
	pushed := waitFor(t, name, "the new generation Ready and awake", awake)
	assert.Equal(t, cur.Generation, pushed.Generation)
	assert.Equal(t, map[string]string{"web": "3/-"}, replicas(t, ns), "the new generation's count, no record left")
	assert.Empty(t, pushed.Status.Sleep.WakeRequested, "a deploy woke it")
	wakes := actionJobs(t, name, contract.ActionWake)
	require.Len(t, wakes, 1)
	var deploy *batchv1.Job
	for _, j := range actionJobs(t, name, contract.ActionDeploy) {
		if j.Labels[contract.LabelGeneration] == fmt.Sprint(pushed.Generation) {
			deploy = &j
		}
	}
	require.NotNil(t, deploy, "the new generation deployed")
	require.NotNil(t, wakes[0].Status.CompletionTime)
	assert.False(t, deploy.CreationTimestamp.Before(wakes[0].Status.CompletionTime), "the deploy started after the wake finished")

	// Asleep again, then a redeploy: awake, the release upgraded once more.
	annotate(t, name, map[string]string{petriv1.AnnotationSleepRequested: requestNow()})
	waitFor(t, name, "asleep again", asleep)
	require.Equal(t, map[string]string{"web": "0/3"}, replicas(t, ns))
	revisions := len(helmReleases(t, ns)["web"])
	setRedeploy(t, name, "after-sleep")
	redeployed := waitFor(t, name, "redeployed and awake", func(e *petriv1.EphemeralEnvironment) bool {
		return awake(e) && e.Status.LastRedeploy == "after-sleep"
	})
	assert.Equal(t, pushed.Generation, redeployed.Generation)
	assert.Equal(t, map[string]string{"web": "3/-"}, replicas(t, ns))
	assert.Len(t, actionJobs(t, name, contract.ActionWake), 2)
	assert.Len(t, helmReleases(t, ns)["web"], revisions+1)

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
}

// A wake that fails (a record that is not a replica count) is reported on
// Ready and retried with a new Job; the environment never reads as Failed,
// and once the record is fixed the next attempt wakes it.
func TestAFailedWakeIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "sleep-broken"
	e := newEnv(name, greeter("web"))
	require.NoError(t, env.Client.Create(ctx, e))
	ns := waitFor(t, name, "Ready", ready).Status.TargetNamespace
	annotate(t, name, map[string]string{petriv1.AnnotationSleepRequested: requestNow()})
	waitFor(t, name, "asleep", asleep)
	patchRecord := func(v string) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-greeter"}}
		require.NoError(t, env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+petriv1.AnnotationReplicasBeforeSleep+`":"`+v+`"}}}`))))
	}
	patchRecord("many")

	annotate(t, name, map[string]string{petriv1.AnnotationWakeRequested: testClock.Now().UTC().Add(time.Second).Format(time.RFC3339Nano)})
	failed := waitFor(t, name, "wake failed", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonWakeFailed)
	})
	assert.Equal(t, petriv1.EnvironmentSleeping, failed.Status.Phase)
	assert.True(t, conditionIs(failed, petriv1.ConditionReconciling, metav1.ConditionTrue, petriv1.ReasonWakeFailed), describe(failed))
	assert.Nil(t, apimeta.FindStatusCondition(failed.Status.Conditions, petriv1.ConditionStalled), "never Stalled")
	// Ready says why, from the failed attempt's status.sleep.lastError. The
	// next attempt may already run (and have cleared lastError) when this
	// object is read: the sleep controller writes status.sleep, the main
	// pass summarises it on Ready a moment later.
	readyCond := apimeta.FindStatusCondition(failed.Status.Conditions, petriv1.ConditionReady)
	assert.Contains(t, readyCond.Message, `annotation petri.dev/replicas-before-sleep is "many", not a replica count`)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(petriv1.GroupVersion.WithKind("EphemeralEnvironment"))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), u))
	res, err := kstatus.Compute(u)
	require.NoError(t, err)
	assert.Equal(t, kstatus.InProgressStatus, res.Status, "a failed wake is retried, not Failed")

	patchRecord("1")
	woken := waitFor(t, name, "awake after the fix", awake)
	assert.Greater(t, woken.Status.Sleep.Attempt, int32(1), "a later attempt woke it")
	assert.Len(t, actionJobs(t, name, contract.ActionWake), int(woken.Status.Sleep.Attempt), "one Job per attempt")
	assert.Equal(t, map[string]string{"web-greeter": "1/-"}, replicas(t, ns))

	require.NoError(t, env.Client.Delete(ctx, e))
	waitGone(t, e)
}

// Every version of an environment through a sleep and a wake reads right
// through kstatus and the documented Argo CD health check: InProgress (Ready
// is False) and never Failed; Argo CD reads an asleep one as Suspended.
func TestSleepingEnvironmentReadsRightThroughKStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "kstatus-sleep"
	standIn(t, name, succeedAll)
	f := followHealth(t, "EphemeralEnvironmentList", name)
	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("app"))))
	f.until("ready", phaseAt(petriv1.EnvironmentReady))

	annotate(t, name, map[string]string{petriv1.AnnotationSleepRequested: requestNow()})
	f.until("asleep", func(u *unstructured.Unstructured) bool {
		a, _, _ := unstructured.NestedBool(u.Object, "status", "sleep", "asleep")
		return a && !reconciling(u)
	})
	assert.Positive(t, f.seen["Sleeping/InProgress"], "sleeping is InProgress: %v", f.seen)
	status, _ := runHealthCheck(t, f.script, f.last)
	assert.Equal(t, "Suspended", status)
	notReady := kubectlWait("--for=condition=Ready", "ee/"+name, "--timeout=1s")
	assert.Contains(t, <-notReady, "timed out", "kubectl wait does not take an asleep environment for ready")
	sleeping := kubectlWait("--for=jsonpath={.status.sleep.asleep}=true", "ee/"+name, "--timeout=10s")
	assert.Contains(t, <-sleeping, "condition met")

	annotate(t, name, map[string]string{petriv1.AnnotationWakeRequested: testClock.Now().UTC().Add(time.Second).Format(time.RFC3339Nano)})
	f.until("ready again", phaseAt(petriv1.EnvironmentReady))
	for k := range f.seen {
		assert.NotContains(t, k, "/Failed", "never Failed: %v", f.seen)
	}

	require.NoError(t, env.Client.Delete(ctx, get(t, name)))
	f.until("deleted", func(*unstructured.Unstructured) bool { return false })
}
