package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/petri-dev/petri/api/contract"
	petriv1 "github.com/petri-dev/petri/api/v1alpha1"
)

// healthWithin is how soon a Ready environment says its workload stopped,
// and a Degraded one that it runs again (issue 36: within 30 s).
const healthWithin = 30 * time.Second

// degraded: the environment was deployed for its generation, and a
// workload of its releases does not run.
func degraded(e *petriv1.EphemeralEnvironment) bool {
	return e.Status.ObservedGeneration == e.Generation && e.Status.Phase == petriv1.EnvironmentDegraded &&
		conditionIs(e, petriv1.ConditionReady, metav1.ConditionFalse, petriv1.ReasonWorkloadsUnhealthy)
}

// waitWithin waits until the environment meets cond, at most within.
func waitWithin(t *testing.T, name, what string, within time.Duration, cond func(*petriv1.EphemeralEnvironment) bool) *petriv1.EphemeralEnvironment {
	t.Helper()
	var last *petriv1.EphemeralEnvironment
	if !eventually(within, func() bool {
		last = current(name)
		return last != nil && cond(last)
	}) {
		require.FailNowf(t, "environment never reached the state in time", "%s: %s within %s; last status: %s", name, what, within, describe(last))
	}
	return last
}

// changeDeployment changes a Deployment of the management cluster as
// someone other than Petri would.
func changeDeployment(t *testing.T, namespace, name string, change func(*appsv1.Deployment)) {
	t.Helper()
	changeDeploymentIn(t, env.Client, namespace, name, change)
}

// changeDeploymentIn changes a Deployment of the cluster c talks to, retrying
// on conflicts with the controllers' own writes.
func changeDeploymentIn(t *testing.T, c client.Client, namespace, name string, change func(*appsv1.Deployment)) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &d); err != nil {
			return err
		}
		change(&d)
		return c.Update(ctx, &d)
	}))
}

// readyEnvironment creates e, deleted when the test ends, and waits until it
// is Ready.
func readyEnvironment(t *testing.T, e *petriv1.EphemeralEnvironment) *petriv1.EphemeralEnvironment {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, e))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, e) })
	return waitFor(t, e.Name, "Ready", ready)
}

// waitReadyAgain waits until the environment is Ready again, phase and
// condition, within healthWithin.
func waitReadyAgain(t *testing.T, name string) *petriv1.EphemeralEnvironment {
	t.Helper()
	return waitWithin(t, name, "Ready again", healthWithin, func(e *petriv1.EphemeralEnvironment) bool {
		return ready(e) && e.Status.Phase == petriv1.EnvironmentReady
	})
}

// scaleTo sets a Deployment's replicas.
func scaleTo(n int32) func(*appsv1.Deployment) {
	return func(d *appsv1.Deployment) { d.Spec.Replicas = new(n) }
}

// failOnStart replaces a Deployment's pod first and gives the new one a
// container that fails on start.
func failOnStart(d *appsv1.Deployment) {
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	c := &d.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "FAIL_ON_START", Value: "the database is gone"})
}

// A Ready environment whose workload crashes (someone changed its
// Deployment so that its new pod fails on start, and replaced the old one
// first) turns Degraded within 30 s, naming the Deployment; put back, it is
// Ready again. Neither change deploys anything.
func TestReadyEnvironmentWhoseWorkloadStopsIsDegraded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := followHealth(t, "EphemeralEnvironmentList", "stops")
	e := readyEnvironment(t, newEnv("stops", app("web", nil)))
	ns, job := e.Status.TargetNamespace, componentNamed(e, "web").Job

	var d appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &d))
	assert.Equal(t, "web", d.Labels[contract.LabelRelease], "the deployer labelled its release's Deployment")
	original := d.Spec.DeepCopy()
	changeDeployment(t, ns, "web", failOnStart)
	e = waitWithin(t, e.Name, "Degraded", healthWithin, degraded)
	msg := findCondition(e, petriv1.ConditionReady).Message
	assert.True(t, strings.HasPrefix(msg, "Deployment web: "), "Ready names the Deployment: %q", msg)
	assert.Equal(t, msg, findCondition(e, petriv1.ConditionReconciling).Message)
	assert.Equal(t, job, componentNamed(e, "web").Job, "nothing is deployed for it")
	assert.Equal(t, petriv1.ComponentDeployed, componentNamed(e, "web").Phase)

	changeDeployment(t, ns, "web", func(d *appsv1.Deployment) { d.Spec = *original })
	e = waitReadyAgain(t, e.Name)
	assert.Equal(t, job, componentNamed(e, "web").Job, "nothing is deployed for it")
	assert.Equal(t, "environment is deployed in "+ns, findCondition(e, petriv1.ConditionReady).Message)

	// kstatus and Argo CD's health check read every version the API
	// server stored: InProgress and Degraded while a workload is down.
	wasDegraded := false
	f.until("Ready after Degraded", func(u *unstructured.Unstructured) bool {
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		wasDegraded = wasDegraded || phase == string(petriv1.EnvironmentDegraded)
		return wasDegraded && phase == string(petriv1.EnvironmentReady)
	})
	assert.Positive(t, f.seen[string(petriv1.EnvironmentDegraded)+"/"+string(kstatus.InProgressStatus)])
}

// A workload scaled to zero by someone else runs nothing, and kstatus
// reads it as Current: the replicas its release asked for tell. Scaled
// back, the environment is Ready again.
func TestWorkloadScaledToZeroIsDegraded(t *testing.T) {
	t.Parallel()
	e := readyEnvironment(t, newEnv("scaled", app("web", nil)))
	ns := e.Status.TargetNamespace

	changeDeployment(t, ns, "web", scaleTo(0))
	e = waitWithin(t, e.Name, "Degraded", healthWithin, degraded)
	assert.Equal(t, "Deployment web: scaled to 0 replicas; its release asks for 1", findCondition(e, petriv1.ConditionReady).Message)

	changeDeployment(t, ns, "web", scaleTo(1))
	waitReadyAgain(t, e.Name)
}

// A workload's event wakes its environment only when its health says
// something else than the environment's status: ten changes of a running
// Deployment (an annotation someone adds, which moves a Deployment's
// generation: each read as in progress until kube-controller-manager
// observed it, and woke a pass, 8 RoleBinding reads in all) cost no pass,
// and the change that stops it costs the passes that write Degraded. Each
// pass reads the environment's RoleBinding from the API server, so a wake
// per event would be a read per event.
func TestWorkloadEventsThatChangeNoHealthWakeNoPass(t *testing.T) {
	t.Parallel()
	e := readyEnvironment(t, newEnv("quiet", app("web", nil)))
	ns := e.Status.TargetNamespace
	waitPassAfterLastWrite(t, e.Name, ns)
	before := roleBindingReadsIn(ns)

	for i := range 10 {
		changeDeployment(t, ns, "web", func(d *appsv1.Deployment) {
			d.Annotations["test.petri.dev/poke"] = fmt.Sprint(i)
		})
	}
	// The same informer delivers the scale after the annotations: once
	// the environment is Degraded, every one of them was heard.
	changeDeployment(t, ns, "web", scaleTo(0))
	waitWithin(t, e.Name, "Degraded", healthWithin, degraded)
	waitPassAfterLastWrite(t, e.Name, ns)
	assert.LessOrEqual(t, roleBindingReadsIn(ns)-before, 3, "passes: Degraded's, one for the scale-down's later events heard before its write showed, and the one its write brings; none for the ten annotations")
}

// A workload of a release deleted outright leaves nothing in the cache to
// judge: the health watch remembers what it saw of the release's deploy,
// and the environment turns Degraded naming what is gone. Made again, it is
// Ready again.
func TestDeletedWorkloadIsDegraded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := readyEnvironment(t, newEnv("deleted", app("web", nil)))
	ns, job := e.Status.TargetNamespace, componentNamed(e, "web").Job

	var d appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &d))
	require.NoError(t, env.Client.Delete(ctx, &d))
	e = waitWithin(t, e.Name, "Degraded", healthWithin, degraded)
	assert.Equal(t, "Deployment web: deleted; its release asks for it", findCondition(e, petriv1.ConditionReady).Message)
	assert.Equal(t, job, componentNamed(e, "web").Job, "nothing is deployed for it")

	again := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: d.Labels, Annotations: d.Annotations},
		Spec:       d.Spec,
	}
	require.NoError(t, env.Client.Create(ctx, again))
	waitReadyAgain(t, e.Name)
}

// A Job of a release (labelled petri.dev/release, in the environment's
// namespace) that failed turns the environment Degraded naming it; one
// that runs does not. Deleted, it is no longer judged: a finished Job's
// TTL deletes it.
func TestFailedJobOfAReleaseIsDegraded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := readyEnvironment(t, newEnv("failedjob", app("web", nil)))
	ns := e.Status.TargetNamespace

	// The release's own pod spec passes the namespace's Pod Security.
	var d appsv1.Deployment
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &d))
	pod := *d.Spec.Template.Spec.DeepCopy()
	pod.RestartPolicy = corev1.RestartPolicyNever
	for i := range pod.Containers {
		pod.Containers[i].ReadinessProbe, pod.Containers[i].LivenessProbe, pod.Containers[i].StartupProbe = nil, nil, nil
		pod.Containers[i].Env = append(pod.Containers[i].Env, corev1.EnvVar{Name: "FAIL_ON_START", Value: "the migration failed"})
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrate", Labels: map[string]string{contract.LabelRelease: "web"}},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32(0)),
			Template:     corev1.PodTemplateSpec{Spec: pod},
		},
	}
	require.NoError(t, env.Client.Create(ctx, job))
	e = waitWithin(t, e.Name, "Degraded", healthWithin+time.Minute, degraded)
	msg := findCondition(e, petriv1.ConditionReady).Message
	assert.True(t, strings.HasPrefix(msg, "Job migrate: "), "Ready names the Job: %q", msg)

	require.NoError(t, env.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	waitReadyAgain(t, e.Name)
}

// An environment placed in a workload cluster is watched there: its
// Deployment in that cluster scaled to zero turns it Degraded within 30 s,
// and so does one that loses availability (its new pod fails on start);
// each put back, it is Ready again, with nothing deployed for it.
func TestPlacedEnvironmentWhoseWorkloadStopsIsDegraded(t *testing.T) {
	t.Parallel()
	wl := workloadCluster(t)
	register(t, "watched", wl.Config.Host, 10, nil)
	ctx := context.Background()
	e := readyEnvironment(t, placedIn("watched", app("web", nil))("placed-stops"))
	require.Equal(t, "watched", e.Status.Cluster)
	ns, job := e.Status.TargetNamespace, componentNamed(e, "web").Job

	changeDeploymentIn(t, wl.Client, ns, "web", scaleTo(0))
	e = waitWithin(t, e.Name, "Degraded", healthWithin, degraded)
	assert.Equal(t, "Deployment web: scaled to 0 replicas; its release asks for 1", findCondition(e, petriv1.ConditionReady).Message)
	assert.Equal(t, job, componentNamed(e, "web").Job, "nothing is deployed for it")
	changeDeploymentIn(t, wl.Client, ns, "web", scaleTo(1))
	waitReadyAgain(t, e.Name)

	var d appsv1.Deployment
	require.NoError(t, wl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &d))
	original := d.Spec.DeepCopy()
	changeDeploymentIn(t, wl.Client, ns, "web", failOnStart)
	e = waitWithin(t, e.Name, "Degraded", healthWithin, degraded)
	msg := findCondition(e, petriv1.ConditionReady).Message
	assert.True(t, strings.HasPrefix(msg, "Deployment web: "), "Ready names the Deployment: %q", msg)
	changeDeploymentIn(t, wl.Client, ns, "web", func(d *appsv1.Deployment) { d.Spec = *original })
	e = waitReadyAgain(t, e.Name)
	assert.Equal(t, job, componentNamed(e, "web").Job, "nothing is deployed for it")
	assert.Equal(t, "watched", e.Status.Cluster)
}
