package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
	"github.com/petri-dev/petri/controllers/internal/naming"
)

// warned reports whether the environment has (or gets within a few
// seconds: Events are written asynchronously) an Event of that type and
// reason whose note contains part.
func warned(t *testing.T, e *petriv1.EphemeralEnvironment, typ, reason, part string) bool {
	t.Helper()
	return eventually(10*time.Second, func() bool {
		var events corev1.EventList
		if err := env.Client.List(context.Background(), &events, client.InNamespace(mgmtNS)); err != nil {
			return false
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.UID == e.UID && ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Message, part) {
				return true
			}
		}
		return false
	})
}

// poke changes an annotation of the environment, which makes the operator
// look at it again, as any change or its periodic check would.
func poke(t *testing.T, name string) {
	t.Helper()
	updateEnv(t, name, func(e *petriv1.EphemeralEnvironment) {
		if e.Annotations == nil {
			e.Annotations = map[string]string{}
		}
		e.Annotations["test.petri.dev/poke"] = testClock.Now().Format(time.RFC3339Nano)
	})
}

// workloadsIntact returns the WorkloadsIntact condition's reason, "" when
// it is absent.
func workloadsIntact(e *petriv1.EphemeralEnvironment) (metav1.ConditionStatus, string) {
	c := findCondition(e, petriv1.ConditionWorkloadsIntact)
	return c.Status, c.Reason
}

// A deleted workload namespace is created again under its locked name and
// everything is deployed into it again: the environment is not Ready
// (WorkloadsLost, naming the namespace) until its release is back, at
// revision 1 of the new namespace, and a Warning Event says what happened.
func TestReplacedNamespaceIsDeployedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "ns-lost"
	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("web"), greeter("api", "web"))))
	first := waitFor(t, name, "ready", ready)
	ns, oldUID := first.Status.TargetNamespace, first.Status.NamespaceUID
	require.NotEmpty(t, oldUID, "the namespace's UID is recorded")
	oldJobs := map[string]string{"web": componentJob(first, "web"), "api": componentJob(first, "api")}

	require.NoError(t, env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	lost := waitFor(t, name, "not ready because its workloads were lost", func(e *petriv1.EphemeralEnvironment) bool {
		status, reason := workloadsIntact(e)
		return status == metav1.ConditionFalse && reason == petriv1.ReasonWorkloadsLost &&
			conditionIs(e, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonWorkloadsLost)
	})
	assert.Contains(t, findCondition(lost, petriv1.ConditionReady).Message, "namespace "+ns+" was deleted and created again")
	assert.NotEqual(t, oldUID, lost.Status.NamespaceUID)

	again := waitFor(t, name, "ready again in the new namespace with its releases", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && e.Status.NamespaceUID != oldUID && len(helmReleases(t, ns)) == 2
	})
	assert.Equal(t, ns, again.Status.TargetNamespace, "the locked name is kept")
	for _, c := range []string{"web", "api"} {
		assert.Equal(t, map[int]string{1: "deployed"}, helmReleases(t, ns)[c], "release %s installed anew", c)
		assert.NotEqual(t, oldJobs[c], componentJob(again, c), "component %s ran a new Job", c)
	}
	status, reason := workloadsIntact(again)
	assert.Equal(t, metav1.ConditionTrue, status)
	assert.Equal(t, petriv1.ReasonWorkloadsRedeployed, reason)
	assert.EqualValues(t, 1, again.Status.Recoveries)
	assert.True(t, warned(t, again, corev1.EventTypeWarning, petriv1.ReasonWorkloadsLost, "namespace "+ns), "a Warning Event says what was lost")
	rb := &rbacv1.RoleBinding{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: naming.DeployerRoleBinding}, rb), "the deployer's RoleBinding is in the new namespace")

	require.NoError(t, env.Client.Delete(ctx, again))
	waitGone(t, again)
}

// A deployer RoleBinding removed behind Petri's back is created again on the
// environment's next pass, with a Warning Event; the releases are then
// verified by a Job running as the deployer identity.
func TestRemovedDeployerRoleBindingIsCreatedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "rb-lost"
	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("web"))))
	e := waitFor(t, name, "ready", ready)
	ns := e.Status.TargetNamespace
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: naming.DeployerRoleBinding}}
	require.NoError(t, env.Client.Delete(ctx, rb))

	poke(t, name)
	require.True(t, eventually(60*time.Second, func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(rb), rb) == nil
	}), "the RoleBinding is created again")
	assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: mgmtNS, Name: naming.DeployerServiceAccount(name)}}, rb.Subjects)
	assert.Equal(t, "admin", rb.RoleRef.Name)

	verified := waitFor(t, name, "releases verified and ready", func(e *petriv1.EphemeralEnvironment) bool {
		status, reason := workloadsIntact(e)
		return ready(e) && status == metav1.ConditionTrue && reason == petriv1.ReasonWorkloadsVerified
	})
	assert.True(t, warned(t, verified, corev1.EventTypeWarning, petriv1.ReasonDeployerAccessLost, "rolebinding "+naming.DeployerRoleBinding+" in "+ns+" was removed"), "a Warning Event says the RoleBinding was removed")
	require.NotNil(t, verified.Status.Verification)
	assert.Equal(t, petriv1.ReasonDeployerAccessLost, verified.Status.Verification.Trigger)
	assert.Equal(t, "Verified: web=1", verified.Status.Verification.Result)
	assert.Equal(t, map[int]string{1: "deployed"}, helmReleases(t, ns)["web"], "nothing was deployed again")

	// Bound to someone else instead: replaced by the operator's own.
	firstCheck := verified.Status.Verification.Job
	rb.Subjects[0].Name = "someone-else"
	require.NoError(t, env.Client.Update(ctx, rb))
	poke(t, name)
	require.True(t, eventually(60*time.Second, func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(rb), rb) == nil && rb.Subjects[0].Name == naming.DeployerServiceAccount(name)
	}), "the changed RoleBinding is replaced")
	verified = waitFor(t, name, "verified again and ready", func(e *petriv1.EphemeralEnvironment) bool {
		status, reason := workloadsIntact(e)
		return ready(e) && status == metav1.ConditionTrue && reason == petriv1.ReasonWorkloadsVerified &&
			e.Status.Verification != nil && e.Status.Verification.Job != firstCheck
	})
	assert.True(t, warned(t, verified, corev1.EventTypeWarning, petriv1.ReasonDeployerAccessLost, "was changed to bind another role or subject"), "a Warning Event says the RoleBinding was changed")

	require.NoError(t, env.Client.Delete(ctx, verified))
	waitGone(t, verified)
}

// withVerifyInterval runs the operator with periodic verify Jobs for the rest
// of a (sequential) test.
func withVerifyInterval(t *testing.T, d time.Duration) {
	t.Helper()
	verifyInterval = d
	restartOperator(t)
	t.Cleanup(func() {
		verifyInterval = 0
		restartOperator(t)
	})
}

// A Helm release deleted behind Petri's back is found by the periodic verify
// Job: the environment is not Ready (WorkloadsLost, naming the release)
// until the component is deployed again.
func deletedReleaseIsFoundByVerificationAndDeployedAgain(t *testing.T) {
	ctx := context.Background()
	const name = "rel-lost"
	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("web"), greeter("api"))))
	e := waitFor(t, name, "ready and verified", func(e *petriv1.EphemeralEnvironment) bool {
		status, _ := workloadsIntact(e)
		return ready(e) && status == metav1.ConditionTrue
	})
	ns := e.Status.TargetNamespace
	webJob := componentJob(e, "web")
	assert.EqualValues(t, 1, componentNamed(e, "web").Revision, "the deploy Job reported its revision")

	// As a cluster admin: helm uninstall's effect on the storage.
	require.NoError(t, env.Client.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": "web"}))
	lost := waitFor(t, name, "release found missing", func(e *petriv1.EphemeralEnvironment) bool {
		return conditionIs(e, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonWorkloadsLost)
	})
	assert.Contains(t, findCondition(lost, petriv1.ConditionReady).Message, "ReleaseMissing: web")
	again := waitFor(t, name, "ready again", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && e.Status.Recoveries == 1 && helmReleases(t, ns)["web"][1] == "deployed"
	})
	assert.NotEqual(t, webJob, componentJob(again, "web"), "web ran a new Job")
	assert.Equal(t, map[int]string{1: "deployed"}, helmReleases(t, ns)["api"], "api, not lost, was left alone")
	assert.True(t, warned(t, again, corev1.EventTypeWarning, petriv1.ReasonWorkloadsLost, "ReleaseMissing: web"))

	// The periodic check goes on after the recovery: a later verify Job
	// finishes and finds the environment intact. (A verified Job is deleted
	// once its outcome is recorded, so between two periods there may be
	// none to list.)
	before := again.Status.Verification
	waitFor(t, name, "verified again after the recovery", func(e *petriv1.EphemeralEnvironment) bool {
		v := e.Status.Verification
		status, _ := workloadsIntact(e)
		return v != nil && v.StartedAt != nil && v.FinishedAt != nil && status == metav1.ConditionTrue &&
			(before == nil || before.StartedAt == nil || !v.StartedAt.Equal(before.StartedAt))
	})
	require.NoError(t, env.Client.Delete(ctx, again))
	waitGone(t, again)
}

// A deploy refused by the API server (here a ResourceQuota that allows no
// more Deployments) is retried with a new Job after its backoff; the attempt
// and the next retry's time are in the status meanwhile, and Ready says
// DeployRetrying. Once the quota is gone, the next attempt deploys it.
func TestRefusedDeployIsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "retry"
	require.NoError(t, env.Client.Create(ctx, newEnv(name, greeter("web"))))
	e := waitFor(t, name, "ready", ready)
	ns := e.Status.TargetNamespace
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-more-deployments"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/deployments.apps": resource.MustParse("1")}},
	}
	// Admission refuses every new Deployment of the namespace: one is there
	// already. This control plane runs no quota controller, so the test
	// writes the usage it would.
	require.NoError(t, env.Client.Create(ctx, quota))
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{"count/deployments.apps": resource.MustParse("1")}}
	require.NoError(t, env.Client.Status().Update(ctx, quota))

	api := greeter("api")
	attempts := int32(6)
	api.Retry = &petriv1.RetryPolicy{Attempts: &attempts, Backoff: &metav1.Duration{Duration: 2 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 4 * time.Second}}
	updateEnv(t, name, func(e *petriv1.EphemeralEnvironment) { e.Spec.Components = append(e.Spec.Components, api) })
	// The spec change deploys web again too: Ready says DeployRetrying once
	// nothing else is in progress, only api's next attempt.
	retrying := waitFor(t, name, "api failed and waits for its next attempt, web deployed", func(e *petriv1.EphemeralEnvironment) bool {
		cs, web := componentNamed(e, "api"), componentNamed(e, "web")
		return cs != nil && cs.Phase == petriv1.ComponentFailed && cs.NextRetryAt != nil &&
			web != nil && web.Phase == petriv1.ComponentDeployed
	})
	cs := componentNamed(retrying, "api")
	assert.True(t, strings.HasPrefix(cs.LastError, "KubernetesRefused:"), cs.LastError)
	assert.Contains(t, cs.LastError, "quota")
	assert.GreaterOrEqual(t, cs.Attempt, int32(1))
	assert.True(t, cs.NextRetryAt.After(cs.FinishedAt.Time), "the next attempt follows the failure after the backoff")
	rc := findCondition(retrying, petriv1.ConditionReady)
	assert.Equal(t, petriv1.ReasonDeployRetrying, rc.Reason)
	assert.Contains(t, rc.Message, "next attempt at "+cs.NextRetryAt.UTC().Format(time.RFC3339))
	assert.NotEqual(t, petriv1.EnvironmentFailed, retrying.Status.Phase, "a failure that can pass is not final")
	assert.True(t, warned(t, retrying, corev1.EventTypeWarning, petriv1.ReasonDeployRetrying, "component api failed (attempt"))

	require.NoError(t, env.Client.Delete(ctx, quota))
	done := waitFor(t, name, "ready after a retry", func(e *petriv1.EphemeralEnvironment) bool { return e.Generation == 2 && ready(e) })
	cs = componentNamed(done, "api")
	assert.Greater(t, cs.Attempt, int32(1), "deployed by a later attempt")
	assert.Nil(t, cs.NextRetryAt)
	jobsOfAPI := 0
	for j := range deployJobs(t, name) {
		if strings.Contains(j, "-api-deploy-") {
			jobsOfAPI++
		}
	}
	assert.Equal(t, int(cs.Attempt), jobsOfAPI, "one Job per attempt")
	assert.Equal(t, "deployed", helmReleases(t, ns)["api"][int(cs.Revision)], "the release is deployed at the revision the last attempt reported")

	require.NoError(t, env.Client.Delete(ctx, done))
	waitGone(t, done)
}

// A failure that cannot pass (the chart version does not exist) is final at
// once: one Job, no next attempt, the environment Failed.
func TestFinalFailureIsNotRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "no-retry"
	c := component("web", registry.Repository(), "greeter", "9.9.9")
	attempts := int32(3)
	c.Retry = &petriv1.RetryPolicy{Attempts: &attempts, Backoff: &metav1.Duration{Duration: time.Second}}
	require.NoError(t, env.Client.Create(ctx, newEnv(name, c)))
	e := waitFor(t, name, "failed", func(e *petriv1.EphemeralEnvironment) bool {
		return e.Status.Phase == petriv1.EnvironmentFailed && e.Status.ObservedGeneration == e.Generation
	})
	cs := componentNamed(e, "web")
	assert.True(t, strings.HasPrefix(cs.LastError, "VersionNotFound:"), cs.LastError)
	assert.EqualValues(t, 1, cs.Attempt)
	assert.Nil(t, cs.NextRetryAt)
	assert.Len(t, deployJobs(t, name), 1)
	assert.Equal(t, petriv1.ReasonDeployFailed, findCondition(e, petriv1.ConditionReady).Reason)

	require.NoError(t, env.Client.Delete(ctx, e))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(e), e); !apierrors.IsNotFound(err) {
		waitGone(t, e)
	}
}

// jobsWithAction lists an environment's Jobs of one action.
func jobsWithAction(t *testing.T, envName, action string) []string {
	t.Helper()
	return jobNames(t, client.MatchingLabels{petriv1.LabelEnvironment: envName, contract.LabelAction: action})
}

// jobNames lists the names of the management namespace's Jobs with labels.
func jobNames(t *testing.T, labels client.MatchingLabels) []string {
	t.Helper()
	var list batchv1.JobList
	require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(mgmtNS), labels))
	var out []string
	for _, j := range list.Items {
		out = append(out, j.Name)
	}
	return out
}

// A replaced namespace loses the binding Secrets too: every binding is
// bound and provisioned again, with Jobs of its own and the same staged
// credentials, before the component that uses it deploys again; teardown
// then deprovisions with those credentials.
func TestReplacedNamespaceBindsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := recordDir(t)
	require.NoError(t, env.Client.Create(ctx, sharedWorkload("pg-lost", dir)))
	swReady(t, "pg-lost")
	const name = "bind-lost"
	require.NoError(t, env.Client.Create(ctx, boundEnv(name, "pg-lost")))
	first := waitFor(t, name, "ready", ready)
	ns := first.Status.TargetNamespace
	secret := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "petri-binding-pg-lost"}, secret))
	password, database := string(secret.Data["ADMIN_PASSWORD"]), string(secret.Data["DATABASE"])

	require.NoError(t, env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	again := waitFor(t, name, "ready again with its binding", func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && e.Status.Recoveries == 1 && e.Status.NamespaceUID != first.Status.NamespaceUID
	})
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "petri-binding-pg-lost"}, secret), "the binding Secret is in the new namespace")
	assert.Equal(t, password, string(secret.Data["ADMIN_PASSWORD"]))
	assert.Equal(t, database, string(secret.Data["DATABASE"]))
	assert.Len(t, jobsWithAction(t, name, contract.ActionBind), 2, "bound again by a Job of its own")
	assert.Len(t, jobsWithAction(t, name, contract.ActionProvision), 2, "provisioned again by a Job of its own")
	assert.Equal(t, map[int]string{1: "deployed"}, helmReleases(t, ns)["app"])
	assert.Equal(t, database, readRecord(t, dir+"/"+name+"-provision.env")["DATABASE"])

	require.NoError(t, env.Client.Delete(ctx, again))
	waitGone(t, again)
	assert.Equal(t, database, readRecord(t, dir+"/"+name+"-deprovision.env")["DATABASE"], "deprovisioned with the same credentials")
	require.NoError(t, env.Client.Delete(ctx, &petriv1.SharedWorkload{ObjectMeta: metav1.ObjectMeta{Namespace: mgmtNS, Name: "pg-lost"}}))
}
